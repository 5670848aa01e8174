"""Liveness of the leader, and readiness with its dependencies (open: no token).

Two questions, two answers: `/livez` says the process serves requests at all (a liveness probe restarts it when it
does not); `/healthz` says it can do its work, PerfDB and the broker answering (a readiness probe takes it out of
service meanwhile). A Redis outage makes the leader unready; it never restarts it."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter

from common.errors import Unavailable
from leader.api.deps import ResourcesDep

router = APIRouter(tags=["health"])

PING_TIMEOUT_S = 2.0


@router.get("/livez")
async def livez() -> dict[str, str]:
    """{"status": "ok"} while the leader's event loop serves requests; asks nothing of PerfDB or Redis."""
    return {"status": "ok"}


@router.get("/healthz")
async def healthz(resources: ResourcesDep) -> dict[str, str]:
    """{"status": "ok"} when PerfDB and the broker both answer a ping; 503 naming the one that does not."""
    try:
        await asyncio.wait_for(resources.db.command("ping"), PING_TIMEOUT_S)
    except Exception as exc:
        raise Unavailable(f"PerfDB does not answer: {type(exc).__name__}", field="mongo") from None
    try:
        await asyncio.wait_for(resources.redis.ping(), PING_TIMEOUT_S)
    except Exception as exc:
        raise Unavailable(f"Redis does not answer: {type(exc).__name__}", field="redis") from None
    return {"status": "ok"}
