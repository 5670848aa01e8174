"""Target secrets in PerfDB: one document per (team, name), the value sealed (leader/secretbox.py). Reads for the API
return views without the value; only `open_for_target` opens values, for the follower running the job."""

from __future__ import annotations

from typing import Any

from bson import Binary
from pymongo.asynchronous.database import AsyncDatabase

from common.errors import InvalidSpec, NotFound
from common.spec.target import TargetSpec
from common.wire.secrets import SecretCreate, SecretView, TargetCredentials
from leader.clock import utcnow
from leader.secretbox import SecretBox

COLLECTION = "secrets"


async def ensure_indexes(db: AsyncDatabase) -> None:
    """A team's list reads by team."""
    await db[COLLECTION].create_index([("team", 1)])


def _id(team: str, name: str) -> str:
    return f"{team}/{name}"


def _view(doc: dict[str, Any]) -> SecretView:
    return SecretView(
        name=doc["name"],
        team=doc["team"],
        kind=doc["kind"],
        header=doc.get("header"),
        created_at=doc["created_at"],
        created_by=doc["created_by"],
    )


async def put(db: AsyncDatabase, box: SecretBox, *, team: str, body: SecretCreate, user: str) -> SecretView:
    """Store (or replace) a team's secret, sealed; acknowledged before returning."""
    binding = _id(team, body.name)
    doc = {
        "_id": binding,
        "team": team,
        "name": body.name,
        "kind": body.kind,
        "header": body.header if body.kind == "header" else None,
        "sealed": Binary(box.seal(body.value.get_secret_value(), binding=binding)),
        "created_at": utcnow(),
        "created_by": user,
    }
    await db[COLLECTION].replace_one({"_id": binding}, doc, upsert=True)
    return _view(doc)


async def list_views(db: AsyncDatabase, *, team: str | None) -> list[SecretView]:
    """A team's secrets (every team's for None), by team and name, without values."""
    query = {} if team is None else {"team": team}
    return [_view(d) async for d in db[COLLECTION].find(query, {"sealed": 0}).sort("_id", 1)]


async def delete(db: AsyncDatabase, *, team: str, name: str) -> SecretView:
    """Remove a team's secret; NotFound naming `name` when there is none."""
    doc = await db[COLLECTION].find_one_and_delete({"_id": _id(team, name)}, {"sealed": 0})
    if doc is None:
        raise NotFound(f"secret {name} does not exist", field="name")
    return _view(doc)


async def check_target(db: AsyncDatabase, *, team: str, target: TargetSpec) -> None:
    """A target's secrets exist in the job's team and are of the kind named (422 naming the field otherwise)."""
    for field, name, kind in (("target.secret", target.secret, "header"), ("target.ca_bundle", target.ca_bundle, "ca_bundle")):
        if name is None:
            continue
        doc = await db[COLLECTION].find_one({"_id": _id(team, name)}, {"kind": 1})
        if doc is None:
            raise InvalidSpec(f"secret {name} does not exist in team {team} (store it: POST /api/v1/secrets)", field=field)
        if doc["kind"] != kind:
            raise InvalidSpec(f"secret {name} is a {doc['kind']}, not a {kind}", field=field)


async def open_for_target(db: AsyncDatabase, box: SecretBox, *, team: str, target: TargetSpec) -> TargetCredentials:
    """The target's header and CA bundle, opened (for the follower running the job, and nobody else)."""
    out = TargetCredentials()
    for name in (target.secret, target.ca_bundle):
        if name is None:
            continue
        doc = await db[COLLECTION].find_one({"_id": _id(team, name)})
        if doc is None:
            raise NotFound(f"secret {name} no longer exists in team {team}", field="target.secret")
        value = box.open(bytes(doc["sealed"]), binding=doc["_id"])
        if doc["kind"] == "header":
            out.headers.append((doc["header"], value))
        else:
            out.ca_pem = value
    return out
