"""The liveness monitor's allowance for its own lag: silence the leader could not hear does not count."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from leader.clock import Ages
from leader.placement import monitor as monitor_module
from leader.placement.monitor import Monitor


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


def test_a_stall_inside_a_tick_is_not_the_followers_silence(monkeypatch: pytest.MonkeyPatch) -> None:
    """The leader blocks for 2.5 s while the tick waits on PerfDB (a GC pause, a CPU storm): a follower beating every
    0.2 s looks 2.6 s silent when the answer comes, and must not be judged missing for it."""
    now = [0.0]
    heard = Ages(clock=lambda: now[0])
    monitor = Monitor(db=None, heard=heard, missing_after_s=1.0, interval_s=0.2, on_requeue=lambda: None,  # type: ignore[arg-type]
                      clock=lambda: now[0])  # fmt: skip
    marked: list[str] = []
    stalls = [2.5]

    async def live_ids(db: Any) -> list[tuple[str, Any]]:
        now[0] += stalls.pop() if stalls else 0.0  # the stall, while the first tick's await is outstanding
        return [("f1", None)]

    async def mark_missing(db: Any, *, follower_id: str, last_seen: Any) -> bool:
        marked.append(follower_id)
        return True

    async def nothing(*args: Any, **kwargs: Any) -> list[str]:
        return []

    monkeypatch.setattr(monitor_module.followers_store, "live_ids", live_ids)
    monkeypatch.setattr(monitor_module.followers_store, "mark_missing", mark_missing)
    monkeypatch.setattr(monitor_module.followers_store, "missing_ids", nothing)
    monkeypatch.setattr(monitor_module.assignments_store, "requeue_follower_jobs", nothing)
    monitor.allowance_s(0.0)  # the previous tick, on time
    now[0] = 0.1
    heard.mark("f1")  # its last beat before the stall
    now[0] = 0.2
    asyncio.run(monitor.tick())
    assert marked == []  # 2.6 s unheard, 2.5 s of it the leader's own stall
    now[0] += 1.5  # then it really falls silent: a timeout after the stall, it is missing
    for _ in range(8):
        now[0] += 0.2
        asyncio.run(monitor.tick())
    assert marked and set(marked) == {"f1"}
