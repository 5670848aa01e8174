"""The load generator's cost per request against one target, measured and kept.

A target's requests do not all cost the generator alike: TLS, large bodies, gRPC framing. Before a job's first point
against a target, one user sends back to back for a second through the same transport the open loop uses (gentle:
one request in flight), and the generator thread's CPU time over the requests sent is the cost. It is kept per
target in the follower's work directory, sizes this job's generators, and is advertised to the leader (which sizes
sharded jobs from it). A target too slow to answer MIN_REQUESTS in that second leaves the learned prior in force.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from collections.abc import Sequence
from pathlib import Path

from follower.loadgen.closedloop import run_closed_loop
from follower.protocols import Endpoint, protocol_of
from follower.protocols.transports import NO_CREDENTIALS, Credentials

log = logging.getLogger(__name__)

CALIBRATE_S = 1.0
MIN_REQUESTS = 50
KEEP = 64  # targets remembered (the most recently calibrated)


def calibrate(
    endpoint: Endpoint,
    bodies: Sequence[bytes],
    *,
    credentials: Credentials = NO_CREDENTIALS,
    duration_s: float = CALIBRATE_S,
    timeout_s: float = 30.0,
) -> float | None:
    """Generator CPU seconds per request against `endpoint` (None: fewer than MIN_REQUESTS answered). Runs its own event
    loop in the calling thread (call it through asyncio.to_thread)."""
    import uvloop

    async def main() -> tuple[int, int, int]:
        async with protocol_of(endpoint).open_transport(
            endpoint, max_concurrency=1, timeout_s=timeout_s, credentials=credentials
        ) as transport:
            cpu0 = time.thread_time_ns()
            records = await run_closed_loop(transport, bodies, 1, int(duration_s * 1e9))
            return time.thread_time_ns() - cpu0, len(records), int((records.status == 200).sum())

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        cpu_ns, sent, ok = runner.run(main())
    if ok < MIN_REQUESTS:
        what = "calibration against %s: %d answers in %.1f s, too few to measure the generator's cost"
        log.info(what, endpoint.base, ok, duration_s)
        return None
    return cpu_ns / 1e9 / sent


class TargetCosts:
    """Generator CPU per request (us) by target (`protocol url`), in a JSON file that survives restarts."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def all(self) -> dict[str, float]:
        """Every kept cost, by target."""
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}
        return {str(k): float(v["us"]) for k, v in data.items() if isinstance(v, dict) and "us" in v}

    def put(self, target: str, cpu_per_request_s: float) -> None:
        """Keep a target's cost (replacing its earlier one; the oldest are dropped past KEEP)."""
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError):
            data = {}
        data[target] = {"us": round(cpu_per_request_s * 1e6, 2), "at": time.time()}
        kept = dict(sorted(data.items(), key=lambda kv: kv[1].get("at", 0))[-KEEP:])
        tmp = self.path.with_name(self.path.name + f".tmp{os.getpid()}")
        tmp.write_text(json.dumps(kept))
        tmp.replace(self.path)  # whole or not at all
