"""The heartbeat thread: tells the leader what this follower runs and holds; re-registers when forgotten."""

from __future__ import annotations

import logging
import threading

from common.wire.followers import ClockOffset, FollowerInfo, Heartbeat
from follower.agent.runloop import RunLoop
from follower.link.leader_client import LeaderClient
from follower.loadgen.calibrate import TargetCosts
from follower.settings import FollowerSettings

log = logging.getLogger(__name__)

CLOCK_EVERY = 10  # beats between two measurements of the clock offset to the leader


def measured_clock(client: LeaderClient, samples: int = 8) -> ClockOffset | None:
    """This host's clock offset to the leader now (None, logged, if the leader's clock does not answer)."""
    try:
        offset_ns, uncertainty_ns = client.clock_offset(samples)
    except Exception as exc:  # the offset is information: its absence stops nothing
        log.warning("clock offset to the leader not measured: %s", exc)
        return None
    return ClockOffset(offset_ms=round(offset_ns / 1e6, 4), uncertainty_ms=round(uncertainty_ns / 1e6, 4))


class Heartbeater(threading.Thread):
    """Beats every interval; re-registers when the leader no longer knows this incarnation."""

    def __init__(self, settings: FollowerSettings, client: LeaderClient, info: FollowerInfo, loop: RunLoop) -> None:
        super().__init__(name="heartbeat", daemon=True)
        self.settings, self.client, self.info, self.loop = settings, client, info, loop
        self.stopped = threading.Event()
        self.beats = 0

    def beat(self) -> Heartbeat:
        """This moment's heartbeat: the running job, what is held (in run order, with estimates) and why it waits."""
        running = self.loop.running_job()
        self.beats += 1
        return Heartbeat(
            incarnation=self.info.incarnation,
            state="busy" if running else "ready",
            running_job=running,
            held=self.loop.holding.snapshot(),
            waiting_reason=self.loop.waiting_reason,
            clock=measured_clock(self.client) if self.beats % CLOCK_EVERY == 0 else None,
            target_costs_us=TargetCosts(self.settings.target_costs_path).all() if self.beats % CLOCK_EVERY == 0 else None,
        )

    def run(self) -> None:
        while not self.stopped.wait(self.settings.heartbeat_interval_s):
            try:
                reply = self.client.heartbeat(self.settings.follower_id, self.beat())
                if reply.cancel:
                    self.loop.cancel(reply.cancel)
                if not reply.known and not self.stopped.is_set():  # a stopping agent has left: it does not come back
                    log.warning("leader does not know this agent; registering again")
                    self.client.register(self.info)
            except Exception as exc:  # a missed beat is logged and retried on the next tick
                log.warning("heartbeat failed: %s", exc)
