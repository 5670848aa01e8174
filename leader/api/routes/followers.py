"""Follower routes: the list for users; registration and heartbeats for agents."""

from __future__ import annotations

import json
import logging
import math
from typing import Annotated

from fastapi import APIRouter, Depends, Request
from pymongo.asynchronous.database import AsyncDatabase

from common.errors import Conflict, Incompatible, NotFound
from common.wire import compat
from common.wire.followers import FollowerInfo, FollowerRegistration, FollowerView, Heartbeat, HeartbeatReply, Leaving
from common.wire.jobs import JobState
from leader.api.deps import (
    AdminAuth,
    BeatsDep,
    Db,
    FollowerPrincipal,
    HeardDep,
    Joining,
    PlacerDep,
    SettingsDep,
    ViewerAuth,
    check_follower,
)
from leader.store import assignments as assignments_store
from leader.store import followers as followers_store
from leader.store import jobs as jobs_store
from leader.store import users as users_store

log = logging.getLogger(__name__)

router = APIRouter(prefix="/followers", tags=["followers"])

RESTARTED_REASON = "follower {follower_id} restarted"


@router.get("", response_model=list[FollowerView], dependencies=[ViewerAuth])
async def list_followers(db: Db) -> list[FollowerView]:
    """Every registered follower with its state (ready, busy, missing)."""
    return await followers_store.list_followers(db)


async def compatible(request: Request) -> None:
    """Refuse a follower whose contract this leader does not speak (409 `incompatible`, saying which side to upgrade),
    read from the raw body before the body is validated: a follower of another contract is told that, not which of its
    fields this leader does not know."""
    try:
        raw = json.loads(await request.body())
    except ValueError:
        return  # the body's own validation says what is wrong with it
    if isinstance(raw, dict):
        reason = compat.refusal(version=raw.get("version"), wire=raw.get("wire"))
        if reason is not None:
            log.warning("refused a follower's registration (%r): %s", str(raw.get("follower_id"))[:64], reason)
            raise Incompatible(reason, field="wire")


@router.post("/register", response_model=FollowerRegistration)
async def register(
    info: FollowerInfo,
    db: Db,
    placer: PlacerDep,
    principal: Joining,
    _compatible: Annotated[None, Depends(compatible)],  # after authentication: no version is told to a stranger
    request: Request,
    settings: SettingsDep,
    heard: HeardDep,
    beats: BeatsDep,
) -> FollowerRegistration:
    """Register or re-register an agent; a new incarnation means the old one's jobs are lost and get requeued.

    An agent joining with the join token (or registered by an admin) gets its own credential, bound to its id. Joining
    with the join token, it is pending (no job, model, data set or secret) until an admin approves it, unless the
    leader's follower_approval is "join-token"; registered by an admin it is approved; re-registering with its own
    credential it keeps what it had. Approval is never inherited by a new join under the same id.
    """
    approved: bool | None = None  # its own credential: as it was
    if principal.role == "follower":
        check_follower(principal, info.follower_id)
    elif principal.role == "join":
        await _refuse_live_takeover(db, info, settings.missing_after_s, heard.age_s(info.follower_id))
        approved = settings.follower_approval == "join-token"
    else:
        approved = True  # an admin registered it
    view, previous = await followers_store.register(db, info=info, approved=approved)
    heard.mark(info.follower_id)
    beats.forget(info.follower_id)
    if previous is not None and previous != info.incarnation:
        requeued = await assignments_store.requeue_follower_jobs(
            db, follower_ids=[info.follower_id], reason=RESTARTED_REASON, lost={info.follower_id: previous}
        )
        if requeued:
            log.warning("follower %s restarted: requeued %s", info.follower_id, ", ".join(requeued))
    log.info(
        "follower %s registered (incarnation %s, backends %s%s)%s",
        info.follower_id,
        info.incarnation,
        info.backends,
        f"; {view.release_note}" if view.release_note else "",
        f": pending until an admin approves it (benchfleet approve {info.follower_id})" if view.state == "pending" else "",
    )
    credential = None
    if principal.role != "follower":
        # A rejoining agent lost its old credential with its process: revoke it, issue a fresh one.
        await users_store.revoke_follower_credentials(db, follower_id=info.follower_id)
        issued = await users_store.create_token(
            db, user=f"follower:{info.follower_id}", role="follower", follower_id=info.follower_id, label="registration"
        )
        credential = issued.token
    placer.fleet_changed()
    telemetry = getattr(request.app.state, "telemetry_address", None)
    return FollowerRegistration(**view.model_dump(), credential=credential, telemetry_address=telemetry)


async def _refuse_live_takeover(db: AsyncDatabase, info: FollowerInfo, missing_after_s: float, age_s: float) -> None:
    """The join token does not take over a live follower's id (whatever incarnation it names: those are listed): it is
    refused (409 with Retry-After) until the live one has been silent for `missing_after_s`. The follower itself
    re-registers with its own credential, and an admin may take any id over. `age_s`: monotonic, since last heard."""
    current = await followers_store.get_follower(db, follower_id=info.follower_id)
    if current is None or current.state == "missing":
        return
    if age_s >= missing_after_s:
        return
    wait = max(1, math.ceil(missing_after_s - age_s))
    raise Conflict(
        f"follower {info.follower_id} is live (seen {age_s:.1f} s ago): the join token cannot take its id "
        f"over; a restarted agent may retry in {wait} s, once the old one is missing",
        field="follower_id",
        retry_after_s=wait,
    )


@router.post("/{follower_id}/heartbeat", response_model=HeartbeatReply)
async def heartbeat(
    follower_id: str,
    beat: Heartbeat,
    db: Db,
    principal: FollowerPrincipal,
    placer: PlacerDep,
    settings: SettingsDep,
    heard: HeardDep,
    beats: BeatsDep,
) -> HeartbeatReply:
    """Record a heartbeat; known=False asks the agent to register again. A beat that changes nothing is written to
    PerfDB at most every missing_after_s / 4 (followers_store.Beats)."""
    check_follower(principal, follower_id)
    arrived = heard.now()  # heard when it arrived, however long PerfDB then takes to record it
    rewrite_after_s = settings.missing_after_s / 4
    said = await followers_store.heartbeat(db, follower_id=follower_id, beat=beat, beats=beats, rewrite_after_s=rewrite_after_s)
    known = said != "unknown"
    if known:
        heard.mark(follower_id, at=arrived)
    if said == "returned":
        # The same process, heard again: it was silent (a starved host, a partition), not dead. Its runs lost meanwhile
        # count against no job (their new attempts stand; the old ones it still holds are cancelled below).
        forgiven = await assignments_store.forgive(db, follower_id=follower_id, incarnation=beat.incarnation)
        forgave = f"; its lost runs forgiven: {', '.join(forgiven)}" if forgiven else ""
        log.warning("follower %s is heard again: missing no more%s", follower_id, forgave)
        placer.fleet_changed()  # (it may take work again)
    # Jobs the agent holds or runs that the leader withdrew (cancelled, requeued): it drops them and stops the running one.
    held = [(h.job_id, h.attempt) for h in beat.held]
    cancel = await jobs_store.stale_held(db, follower_id=follower_id, held=held) if known else []
    if known:
        # Sent long enough ago (by the placer's monotonic clock), yet not among what the agent holds: the message was
        # lost on the way; place it again. The placer's book names the candidates, so a follower with a deep queue
        # costs no read of its jobs on every beat (only without a book yet are they all read).
        holds = {h.job_id for h in beat.held}
        among = None
        if placer.book is not None:
            sent = placer.book.sent_to(follower_id)
            among = [j for j, a in sent if j not in holds and placer.sent.age_s((j, a)) >= settings.undelivered_after_s]
        lost = (
            await assignments_store.requeue_undelivered(
                db,
                follower_id=follower_id,
                held=holds,
                sent_age_s=placer.sent.age_s,
                after_s=settings.undelivered_after_s,
                among=among,
            )
            if among is None or among
            else []
        )
        if lost:
            log.warning("follower %s never received job(s) %s: requeued", follower_id, ", ".join(lost))
            placer.nudge()
    return HeartbeatReply(known=known, cancel=cancel)


LEFT_REASON = "follower {follower_id} stopped (SIGTERM) and gave its jobs back"


@router.post("/{follower_id}/leave", status_code=204)
async def leave(
    follower_id: str, body: Leaving, db: Db, principal: FollowerPrincipal, placer: PlacerDep, beats: BeatsDep
) -> None:
    """An agent stopping: it is missing at once (nothing more is placed on it) and every job it held or ran goes back
    to the queue as a new attempt, so nothing waits for its heartbeats to be missed; a report of the attempt it was
    running is stale from now on. 404 for an agent that is not the registered incarnation."""
    check_follower(principal, follower_id)
    beats.forget(follower_id)
    if not await followers_store.leave(db, follower_id=follower_id, incarnation=body.incarnation):
        raise NotFound(f"follower {follower_id} is not registered with that incarnation", field="incarnation")
    requeued = await assignments_store.requeue_follower_jobs(db, follower_ids=[follower_id], reason=LEFT_REASON)
    if requeued:
        placer.nudge()
    log.info("follower %s left; requeued %d job(s)", follower_id, len(requeued))


DRAINED_REASON = "follower {follower_id} drained by an admin"
REMOVED_REASON = "follower {follower_id} removed by an admin"


@router.post("/{follower_id}/drain", response_model=FollowerView, dependencies=[AdminAuth])
async def drain(follower_id: str, db: Db, placer: PlacerDep) -> FollowerView:
    """Take no new jobs; the running job finishes, held jobs not yet started go back to placement."""
    view = await followers_store.set_draining(db, follower_id=follower_id, draining=True)
    requeued = await assignments_store.requeue_follower_jobs(
        db, follower_ids=[follower_id], reason=DRAINED_REASON, states=[JobState.assigned.value]
    )
    if requeued:
        placer.nudge()
    log.info("follower %s draining; requeued %d held job(s)", follower_id, len(requeued))
    return view


@router.post("/{follower_id}/approve", response_model=FollowerView, dependencies=[AdminAuth])
async def approve(follower_id: str, db: Db, placer: PlacerDep) -> FollowerView:
    """Approve a pending follower (one that joined with the join token): it takes jobs, and reads their models, data
    sets and target secrets, from now on. Approving an approved one changes nothing."""
    view = await followers_store.approve(db, follower_id=follower_id)
    log.info("follower %s approved", follower_id)
    placer.fleet_changed()
    return view


@router.post("/{follower_id}/resume", response_model=FollowerView, dependencies=[AdminAuth])
async def resume(follower_id: str, db: Db, placer: PlacerDep) -> FollowerView:
    """End a drain: the follower takes jobs again."""
    view = await followers_store.set_draining(db, follower_id=follower_id, draining=False)
    placer.fleet_changed()
    return view


@router.delete("/{follower_id}", status_code=204, dependencies=[AdminAuth])
async def remove(follower_id: str, db: Db, placer: PlacerDep, beats: BeatsDep) -> None:
    """Forget a follower; its jobs go back to placement as new attempts."""
    await followers_store.remove(db, follower_id=follower_id)
    beats.forget(follower_id)
    requeued = await assignments_store.requeue_follower_jobs(db, follower_ids=[follower_id], reason=REMOVED_REASON)
    if requeued:
        placer.nudge()
    log.info("follower %s removed; requeued %d job(s)", follower_id, len(requeued))
