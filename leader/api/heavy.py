"""A request's heavy work (an upload's check, an export's encoding) off the event loop and a few at a time: the loop
keeps answering heartbeats and reads meanwhile, and N concurrent requests hold at most CAPACITY[kind] of their copies
in memory; the others wait their turn."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Literal, TypeVar

import anyio
import anyio.to_thread

Kind = Literal["upload", "export"]
CAPACITY: dict[Kind, int] = {"upload": 1, "export": 2}
T = TypeVar("T")

_LIMITERS: dict[tuple[int, Kind], anyio.CapacityLimiter] = {}


def limiter(kind: Kind) -> anyio.CapacityLimiter:
    """This event loop's limiter for `kind` (one leader runs one loop; a test's new app gets fresh ones)."""
    key = (id(asyncio.get_running_loop()), kind)
    if key not in _LIMITERS:
        for stale in [k for k in _LIMITERS if k[1] == kind]:
            del _LIMITERS[stale]
        _LIMITERS[key] = anyio.CapacityLimiter(CAPACITY[kind])
    return _LIMITERS[key]


async def run(kind: Kind, fn: Callable[..., T], *args: object) -> T:
    """`fn(*args)` in a worker thread, at most CAPACITY[kind] at once."""
    return await anyio.to_thread.run_sync(fn, *args, limiter=limiter(kind))
