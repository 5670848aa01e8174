"""The liveness monitor's allowance for its own lag: silence the leader could not hear does not count."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from leader.scheduler.monitor import Monitor

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def test_a_late_tick_extends_the_timeout_for_one_timeout_only() -> None:
    monitor = Monitor(db=None, missing_after_s=10.0, interval_s=1.0, on_requeue=lambda: None)  # type: ignore[arg-type]
    at = [T0 + timedelta(seconds=s) for s in (0.0, 1.0, 2.1)]  # on time, within the 0.5 s slack
    assert [monitor.allowance_s(t) for t in at] == [0.0, 0.0, 0.0]
    stalled = T0 + timedelta(seconds=9.1)  # 7 s late: the leader could not handle heartbeats for 6 of them
    assert monitor.allowance_s(stalled) == 6.0
    assert monitor.allowance_s(stalled + timedelta(seconds=1)) == 6.0  # still within one timeout of the stall
    later = stalled + timedelta(seconds=1)
    for _ in range(10):
        later += timedelta(seconds=1)
        allowance = monitor.allowance_s(later)
    assert allowance == 0.0  # a timeout after the stall, silence counts in full again
