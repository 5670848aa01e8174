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
    """Beats every interval; re-registers when the leader no longer knows this incarnation.

    A beat is one POST and nothing else: the clock offset to the leader (eight round trips, each up to the client's
    timeout on a busy leader) is measured beside it, in a thread of its own every CLOCK_EVERY beats, and rides on the
    first beat after it is known. Measured inline, it delayed every tenth beat by as long as those round trips took,
    and a busy leader made a live follower look silent."""

    def __init__(self, settings: FollowerSettings, client: LeaderClient, info: FollowerInfo, loop: RunLoop) -> None:
        super().__init__(name="heartbeat", daemon=True)
        self.settings, self.client, self.info, self.loop = settings, client, info, loop
        self.stopped = threading.Event()
        self.beats = 0
        self._clock: ClockOffset | None = None  # measured, not yet sent
        self._clock_lock = threading.Lock()
        self._measuring: threading.Thread | None = None

    def beat(self) -> Heartbeat:
        """This moment's heartbeat: the running job, what is held (in run order, with estimates) and why it waits."""
        running = self.loop.running_job()
        self.beats += 1
        if self.beats % CLOCK_EVERY == 0 and (self._measuring is None or not self._measuring.is_alive()):
            self._measuring = threading.Thread(target=self._measure_clock, name="clock-offset", daemon=True)
            self._measuring.start()
        with self._clock_lock:
            clock, self._clock = self._clock, None
        return Heartbeat(
            incarnation=self.info.incarnation,
            state="busy" if running else "ready",
            running_job=running,
            held=self.loop.holding.snapshot(),
            waiting_reason=self.loop.waiting_reason,
            clock=clock,
            target_costs_us=TargetCosts(self.settings.target_costs_path).all() if self.beats % CLOCK_EVERY == 0 else None,
        )

    def _measure_clock(self) -> None:
        measured = measured_clock(self.client)
        with self._clock_lock:
            self._clock = measured

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
