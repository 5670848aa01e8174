"""The liveness monitor's allowance for its own lag: silence the leader could not hear does not count."""

from __future__ import annotations

from leader.clock import Ages
from leader.scheduler.monitor import Monitor


def test_a_late_tick_extends_the_timeout_for_one_timeout_only() -> None:
    monitor = Monitor(db=None, heard=Ages(), missing_after_s=10.0, interval_s=1.0, on_requeue=lambda: None)  # type: ignore[arg-type]
    at = [0.0, 1.0, 2.1]  # monotonic seconds: on time, within the 0.5 s slack
    assert [monitor.allowance_s(t) for t in at] == [0.0, 0.0, 0.0]
    stalled = 9.1  # 7 s late: the leader could not handle heartbeats for 6 of them
    assert monitor.allowance_s(stalled) == 6.0
    assert monitor.allowance_s(stalled + 1) == 6.0  # still within one timeout of the stall
    later = stalled + 1
    for _ in range(10):
        later += 1
        allowance = monitor.allowance_s(later)
    assert allowance == 0.0  # a timeout after the stall, silence counts in full again


def test_ages_count_from_the_leaders_start_and_ignore_the_wall_clock() -> None:
    now = [100.0]
    ages = Ages(clock=lambda: now[0])
    now[0] = 103.0
    assert ages.age_s("never-heard") == 3.0  # as old as the leader: one full timeout after a restart
    ages.mark("f1")
    now[0] = 104.5
    assert ages.age_s("f1") == 1.5 and ages.age_s("never-heard") == 4.5


def test_wall_steps_are_noticed_and_slow_drift_is_not() -> None:
    from leader.clock import WallSteps

    wall, mono = [1_000_000.0], [50.0]
    steps = WallSteps(wall=lambda: wall[0], mono=lambda: mono[0])
    wall[0] += 10.0005
    mono[0] += 10.0
    assert steps.stepped_s() == 0.0  # 0.5 ms of drift over 10 s: NTP slewing, not a step
    wall[0] -= 4 * 3600
    mono[0] += 1.0
    wall[0] += 1.0
    assert round(steps.stepped_s()) == -4 * 3600
    assert steps.stepped_s() == 0.0
