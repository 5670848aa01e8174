"""A leader stops on SIGTERM inside the time a container runtime gives it (10 s before a kill), even with its database
frozen: each shutdown step is bounded, and so are all of them together (leader.app.SHUTDOWN_TOTAL_S)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from benchfleet.stack import LocalStack
from leader.__main__ import SHUTDOWN_GRACE_S
from leader.app import SHUTDOWN_STEP_S, SHUTDOWN_TOTAL_S


def test_a_sigterm_stops_the_leader_within_its_budget_while_its_database_is_frozen(tmp_path: Path) -> None:
    # Its own database, frozen below (SIGSTOP): connections hang rather than fail, the slowest case for a shutdown.
    with LocalStack(tmp_path) as stack:
        stack.start_redis()
        stack.start_mongo()
        leader = stack.start_leader()
        mongo = stack.procs["mongo"]
        assert mongo.pid is not None and leader.pid is not None
        os.kill(mongo.pid, signal.SIGSTOP)
        try:
            started = time.monotonic()
            os.kill(leader.pid, signal.SIGTERM)
            while leader.alive() and time.monotonic() - started < 30:
                time.sleep(0.05)
            took = time.monotonic() - started
        finally:
            os.kill(mongo.pid, signal.SIGCONT)
        log = (tmp_path / "leader.log").read_text(errors="replace")
        assert not leader.alive(), log[-2000:]
        assert "Application shutdown complete" in log, log[-2000:]
        # Two steps could each take SHUTDOWN_STEP_S (the database probe and the client, both waiting on the frozen
        # database): the total bound is what holds the shutdown under the runtime's 10 s, and it is what was used.
        assert SHUTDOWN_GRACE_S + SHUTDOWN_TOTAL_S < 10 < SHUTDOWN_GRACE_S + 2 * SHUTDOWN_STEP_S
        assert "did not stop within" in log
        assert took < 10, (took, log[-2000:])
