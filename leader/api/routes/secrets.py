"""Target secrets: a team stores one (write-only: no answer ever holds a value), lists and deletes them; the follower
running an attempt of a target job fetches that job's, opened, and nobody else can."""

from __future__ import annotations

import logging

from fastapi import APIRouter, Request

from common.errors import Conflict, Forbidden, Unavailable
from common.spec.target import TargetSpec
from common.wire.jobs import JobState
from common.wire.secrets import SecretCreate, SecretView, TargetCredentials
from leader.api.deps import Db, FollowerPrincipal, SettingsDep, Submitter, Viewer, check_follower
from leader.jobs.targets import allowed_networks
from leader.secretbox import SecretBox
from leader.settings import LeaderSettings
from leader.store import jobs as jobs_store
from leader.store import secrets as secrets_store

log = logging.getLogger(__name__)

router = APIRouter(prefix="/secrets", tags=["secrets"])
job_router = APIRouter(prefix="/jobs", tags=["secrets"])


def secret_box(request: Request, settings: LeaderSettings) -> SecretBox:
    """The leader's sealing key (built once); 503 naming the setting when it has none."""
    box = getattr(request.app.state, "secret_box", None)
    if box is None:
        if settings.secret_key is None:
            raise Unavailable(
                "target secrets need a key: set BENCHFLEET_LEADER_SECRET_KEY (24 characters or more)", field="secret_key"
            )
        box = request.app.state.secret_box = SecretBox(settings.secret_key.get_secret_value())
    return box


@router.post("", status_code=201, response_model=SecretView)
async def put_secret(body: SecretCreate, request: Request, db: Db, settings: SettingsDep, principal: Submitter) -> SecretView:
    """Store a secret for the caller's team (replacing one of the same name). The answer, like every other, never
    holds the value."""
    view = await secrets_store.put(db, secret_box(request, settings), team=principal.team, body=body, user=principal.user)
    log.info("secret %s of team %s stored by %s (%s)", view.name, view.team, principal.user, view.kind)
    return view


@router.get("", response_model=list[SecretView])
async def list_secrets(db: Db, principal: Viewer) -> list[SecretView]:
    """The caller's team's secrets (an admin's: every team's), without values."""
    return await secrets_store.list_views(db, team=principal.scope)


@router.delete("/{name}", response_model=SecretView)
async def delete_secret(name: str, db: Db, principal: Submitter) -> SecretView:
    """Remove one of the caller's team's secrets; jobs naming it fail to open it from then on."""
    view = await secrets_store.delete(db, team=principal.team, name=name)
    log.info("secret %s of team %s deleted by %s", view.name, view.team, principal.user)
    return view


@job_router.get("/{job_id}/target-credentials", response_model=TargetCredentials)
async def target_credentials(
    job_id: str, attempt: int, follower_id: str, request: Request, db: Db, settings: SettingsDep, principal: FollowerPrincipal
) -> TargetCredentials:
    """The opened secrets of a target job and the networks its team may reach, for the follower running its current
    attempt (403 for anyone else, 409 for an attempt that is not the job's running one)."""
    check_follower(principal, follower_id)
    if principal.role != "follower":
        raise Forbidden("only the follower running the job fetches its target's secrets", field="follower_id")
    job = await jobs_store.get_job(db, job_id=job_id)
    if job.follower_id != follower_id or job.attempt != attempt or job.state not in (JobState.assigned, JobState.running):
        raise Conflict(f"attempt {attempt} of job {job_id} is not running on follower {follower_id}", field="attempt")
    target: TargetSpec | None = job.spec.target
    allow = [str(n) for n in await allowed_networks(db, team=job.team, leader_allow=settings.egress_networks)]
    if target is None or (target.secret is None and target.ca_bundle is None):
        return TargetCredentials(egress_allow=allow)  # nothing to open (a leader without secret_key drives these too)
    opened = await secrets_store.open_for_target(db, secret_box(request, settings), team=job.team, target=target)
    return opened.model_copy(update={"egress_allow": allow})
