"""A target job's model at submission: the stored model of that name when the team has one (its signature, and for
a language model its tokenizer), else the endpoint's own, described by the spec's inputs or, on the follower, by the
endpoint's metadata. Its secrets must exist now, not fail on a follower later."""

from __future__ import annotations

from datetime import UTC, datetime
from urllib.parse import urlsplit

from pymongo.asynchronous.database import AsyncDatabase

from common import egress
from common.errors import InvalidSpec, NotFound
from common.spec.job import JobSpec
from common.wire.models import ModelMeta, TensorSpec
from leader.store import models as models_store
from leader.store import secrets as secrets_store
from leader.store import teams as teams_store


async def allowed_networks(
    db: AsyncDatabase, *, team: str, leader_allow: tuple[egress.Network, ...]
) -> tuple[egress.Network, ...]:
    """The non-public networks the team's targets may be: the leader's allow-list and the team's own."""
    return leader_allow + egress.networks(await teams_store.egress_allow(db, team))


async def target_model(
    db: AsyncDatabase, spec: JobSpec, *, team: str, owner: str, leader_allow: tuple[egress.Network, ...]
) -> ModelMeta:
    """The model a target job measures (422/404 naming the field when the target cannot be driven as asked, or when
    its address is one the team may not reach: common/egress.py)."""
    target = spec.target
    assert target is not None
    host = urlsplit(target.url).hostname or ""
    if (why := egress.team_refusal(host, await allowed_networks(db, team=team, leader_allow=leader_allow))) is not None:
        raise InvalidSpec(f"team {team} may not point a target at {host}: {why}", field="target.url")
    await secrets_store.check_target(db, team=team, target=target)
    try:
        stored: ModelMeta | None = await models_store.get_model(
            db, name=spec.model.name, version=spec.model.version, field="model.ref", team=team
        )
    except NotFound:
        stored = None
    if target.is_llm:
        if stored is None or not stored.is_llm:
            raise InvalidSpec(
                f"an OpenAI-compatible target is driven with its model's tokenizer: upload {spec.model.ref}'s "
                "tokenizer (an hf bundle) to the repository under that name",
                field="model.ref",
            )
        return stored
    if stored is not None and stored.is_llm:
        raise InvalidSpec(f"{stored.ref} is a language model: its target needs protocol: openai", field="target.protocol")
    if stored is not None:
        return stored
    # Every tensor protocol describes its models (KServe v2 metadata over HTTP or gRPC, TF Serving's signature): the
    # follower reads the signature there and checks it against `inputs`, when given.
    inputs = [TensorSpec(name=t.name, datatype=t.datatype, shape=t.shape) for t in spec.inputs or []]  # type: ignore[arg-type]
    return ModelMeta(
        name=spec.model.name,
        version=spec.model.version or "endpoint",
        format="endpoint",
        inputs=inputs,
        outputs=[],
        sha256="",
        size_bytes=0,
        created_at=datetime.now(UTC),
        owner=owner,
        team=team,
    )
