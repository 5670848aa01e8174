"""A target job's endpoint before its first point: its credentials fetched from the leader (for this attempt only,
kept in memory), and the model's signature read from the endpoint's metadata where it has one."""

from __future__ import annotations

import logging
from urllib.parse import urlsplit

from common import egress
from common.formats.signature import input_mismatches
from common.wire.jobs import JobTask
from common.wire.models import ModelMeta
from follower.backends.endpoint import pin, read_signature
from follower.link.leader_client import LeaderClient
from follower.protocols import EndpointError, EndpointRefused
from follower.protocols.transports import Credentials
from follower.settings import FollowerSettings

log = logging.getLogger(__name__)


def fleet_services(settings: FollowerSettings, telemetry: str | None) -> tuple[tuple[str, int], ...]:
    """(host, port) of every service of the fleet this follower knows: the leader, its live-progress listener, the
    broker, this follower's metrics port and the services its settings name."""
    urls = [settings.leader_url, settings.redis_url]
    places = [f"//{p.strip()}" for p in [telemetry or "", *settings.fleet_services.split(",")] if p.strip()]
    out = []
    for url in urls + places:
        parts = urlsplit(url)
        port = parts.port or {"http": 80, "https": 443, "redis": 6379, "rediss": 6379}.get(parts.scheme)
        if parts.hostname and port:
            out.append((parts.hostname, port))
    if settings.metrics_port > 0:
        out.append((settings.metrics_host, settings.metrics_port))
    return tuple(out)


def resolve_target(
    task: JobTask, client: LeaderClient, follower_id: str, fleet: tuple[tuple[str, int], ...]
) -> tuple[ModelMeta, Credentials]:
    """(the model as the endpoint describes it, the credentials to drive it with, pinned to the address checked against
    the team's allow-list and the fleet's own services `fleet`); EndpointRefused naming a refused address, a
    RuntimeError naming the endpoint when its signature cannot be read or differs from the job's `inputs`."""
    target = task.spec.target
    assert target is not None
    opened = client.target_credentials(task.job_id, task.attempt, follower_id)
    credentials = Credentials(headers=tuple(opened.headers), verify=target.verify_tls, ca_pem=opened.ca_pem)
    credentials = pin(target, credentials, egress.Policy(allow=egress.networks(opened.egress_allow), fleet=fleet))
    model = task.model
    if model.format != "endpoint":
        return model, credentials  # a stored model's signature (and, for a language model, its tokenizer)
    try:
        inputs = read_signature(target, model.name, credentials)
    except EndpointRefused:
        raise
    except EndpointError as exc:
        if task.spec.inputs is None:
            raise RuntimeError(f"the endpoint's signature could not be read ({exc}) and the job gives no `inputs`") from None
        log.warning("endpoint %s: no signature from its metadata (%s); the job's inputs are used", target.url, exc)
        inputs = None
    if inputs is None:
        return model, credentials  # the spec's inputs, checked at submission
    if task.spec.inputs is not None and (problems := input_mismatches(task.spec.inputs, inputs)):
        raise RuntimeError(
            f"the endpoint's model {target.model_name or model.name} does not match the job's inputs: {'; '.join(problems)}"
        )
    log.info(
        "endpoint %s: model %s takes %s",
        target.url,
        target.model_name or model.name,
        ", ".join(f"{t.name} {t.datatype}{t.shape}" for t in inputs),
    )
    return model.model_copy(update={"inputs": inputs}), credentials
