"""The follower's run loop: one benchmark at a time, the next held job in tier-2 order, when the host is fit."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from follower.agent.holding import HeldEntry, HoldingQueue
from follower.host.gate import Gate

log = logging.getLogger(__name__)

# How often a waiting loop re-checks the gate (foreign GPU process, busy CPU) and the order of held jobs.
GATE_POLL_S = 1.0

Runner = Callable[[dict, threading.Event], str]


class RunLoop(threading.Thread):
    """Takes the best held job, waits while the gate says so (the reason goes into the heartbeat), runs it."""

    def __init__(self, holding: HoldingQueue, gate: Gate, run: Runner) -> None:
        super().__init__(name="run-loop", daemon=True)
        self.holding, self.gate, self.run_job = holding, gate, run
        self.stopped = threading.Event()
        self._lock = threading.Lock()
        self._running: HeldEntry | None = None
        self._cancel = threading.Event()
        self.waiting_reason: str | None = None

    def run(self) -> None:
        while not self.stopped.is_set():
            if not self.holding.wait(timeout_s=0.5):
                continue
            reason = self.gate.why_wait()
            if reason is not None:
                if reason != self.waiting_reason:
                    log.info("%s", reason)
                self.waiting_reason = reason
                self.stopped.wait(GATE_POLL_S)
                continue  # then pick again: a shorter job may have arrived meanwhile
            self.waiting_reason = None
            entry = self.holding.peek()
            if entry is None or not self.holding.start(entry):
                continue
            with self._lock:
                self._running, self._cancel = entry, threading.Event()
                cancel = self._cancel
            try:
                outcome = self.run_job(entry.payload, cancel)
                log.info("job %s attempt %d: %s", entry.job_id, entry.attempt, outcome)
            except Exception:  # execute reports its own failures; this only keeps the loop alive
                log.exception("job %s attempt %d crashed the runner", entry.job_id, entry.attempt)
            finally:
                with self._lock:
                    self._running = None
                self.holding.done(entry)

    def running_job(self) -> str | None:
        """The job id of the attempt running now, if any (the heartbeat reports it)."""
        with self._lock:
            return self._running.job_id if self._running is not None else None

    def cancel(self, job_ids: list[str]) -> None:
        """The leader withdrew these jobs: drop the held ones and stop the running one (its server is stopped)."""
        dropped = self.holding.drop(job_ids)
        if dropped:
            log.info("dropped held job(s) withdrawn by the leader: %s", ", ".join(dropped))
        with self._lock:
            if self._running is not None and self._running.job_id in job_ids:
                log.info("stopping running job %s: withdrawn by the leader", self._running.job_id)
                self._cancel.set()

    def halt(self, grace_s: float) -> bool:
        """Take no further job and stop the running one (its point and server are stopped; it reports nothing: the
        leader has taken the job back); wait up to `grace_s` for that. Whether the loop ended in time."""
        self.stopped.set()
        with self._lock:
            if self._running is not None:
                log.info("stopping running job %s: this agent is stopping", self._running.job_id)
                self._cancel.set()
        self.join(grace_s)
        return not self.is_alive()
