"""Follower routes: the list for users; registration and heartbeats for agents."""

from __future__ import annotations

import logging

from fastapi import APIRouter

from common.followers import FollowerInfo, FollowerView, Heartbeat, HeartbeatReply
from leader.api.deps import AdminAuth, Db, FollowerAuth, PlacerDep
from leader.store import followers as followers_store
from leader.store import jobs as jobs_store

log = logging.getLogger(__name__)

router = APIRouter(prefix="/followers", tags=["followers"])

RESTARTED_REASON = "follower {follower_id} restarted"


@router.get("", response_model=list[FollowerView], dependencies=[AdminAuth])
async def list_followers(db: Db) -> list[FollowerView]:
    """Every registered follower with its state (ready, busy, missing)."""
    return await followers_store.list_followers(db)


@router.post("/register", response_model=FollowerView, dependencies=[FollowerAuth])
async def register(info: FollowerInfo, db: Db, placer: PlacerDep) -> FollowerView:
    """Register or re-register an agent; a new incarnation means the old one's jobs are lost and get requeued."""
    view, previous = await followers_store.register(db, info=info)
    if previous is not None and previous != info.incarnation:
        requeued = await jobs_store.requeue_follower_jobs(db, follower_ids=[info.follower_id], reason=RESTARTED_REASON)
        if requeued:
            log.warning("follower %s restarted: requeued %s", info.follower_id, ", ".join(requeued))
    log.info("follower %s registered (incarnation %s, backends %s)", info.follower_id, info.incarnation, info.backends)
    placer.nudge()
    return view


@router.post("/{follower_id}/heartbeat", response_model=HeartbeatReply, dependencies=[FollowerAuth])
async def heartbeat(follower_id: str, beat: Heartbeat, db: Db) -> HeartbeatReply:
    """Record a heartbeat; known=False asks the agent to register again."""
    return HeartbeatReply(known=await followers_store.heartbeat(db, follower_id=follower_id, beat=beat))
