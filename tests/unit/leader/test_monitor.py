"""The liveness monitor's allowance for its own lag: silence the leader could not hear does not count."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from leader.clock import Ages
from leader.placement import monitor as monitor_module
from leader.placement.monitor import Monitor


def _one_follower_stores(monkeypatch: pytest.MonkeyPatch, marked: list[str], *, before_answer: Callable[[], None]) -> None:
    """PerfDB as the monitor sees it, in memory: one live follower, f1 (`before_answer` runs while the tick awaits the
    list: a stall there), and each mark_missing noted in `marked`."""

    async def live_ids(db: Any) -> list[tuple[str, Any]]:
        before_answer()
        return [("f1", None)]

    async def mark_missing(db: Any, *, follower_id: str, last_seen: Any) -> bool:
        marked.append(follower_id)
        return True

    async def missing(db: Any) -> dict[str, str | None]:
        return {}

    async def requeue_follower_jobs(db: Any, *, follower_ids: list[str], reason: str, lost: Any = None) -> list[str]:
        return []

    monkeypatch.setattr(monitor_module.followers_store, "live_ids", live_ids)
    monkeypatch.setattr(monitor_module.followers_store, "mark_missing", mark_missing)
    monkeypatch.setattr(monitor_module.followers_store, "missing", missing)
    monkeypatch.setattr(monitor_module.assignments_store, "requeue_follower_jobs", requeue_follower_jobs)


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
    # A beat is heard when it arrived (now() read then), however long recording it took; never moved back.
    arrived = ages.now()
    now[0] = 110.0
    ages.mark("f1", at=arrived)
    assert ages.age_s("f1") == 5.5
    ages.mark("f1", at=arrived - 3.0)  # an older beat recorded late
    assert ages.age_s("f1") == 5.5


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

    def stall() -> None:  # the stall, while the first tick's await is outstanding
        now[0] += stalls.pop() if stalls else 0.0

    _one_follower_stores(monkeypatch, marked, before_answer=stall)
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


def test_heartbeats_answered_503_while_perfdb_failed_are_not_the_followers_silence(monkeypatch: pytest.MonkeyPatch) -> None:
    """PerfDB stalls for 8 s (its pings fail from t=10 until a good one at t=18): the leader answers every heartbeat 503
    meanwhile, unheard. A follower beating throughout, last heard at 9.8, must not be judged missing once PerfDB is
    back (seen in a run: a vLLM start starved the embedded database, and the job on a live follower was requeued and its
    server started again); silence after that counts in full."""
    from leader.dbhealth import DbHealth

    now = [0.0]
    health = DbHealth("mongodb://127.0.0.1:9/?directConnection=true", clock=lambda: now[0])  # never contacted
    now[0] = 10.0
    health.failed("timeout")
    now[0] = 13.0
    health.failed("timeout")
    assert health.down and health.deaf_s(15.0, 3.0) == 3.0  # failing still: the whole window
    now[0] = 18.0
    health.answered()
    assert not health.down
    assert [health.deaf_s(t, 3.0) for t in (18.0, 20.0, 21.0, 30.0)] == [3.0, 1.0, 0.0, 0.0]
    assert health.deaf_s(18.0, 10.0) == 8.0  # from the first failed ping, not from when it was called down

    heard = Ages(clock=lambda: now[0])
    monitor = Monitor(
        db=None,  # type: ignore[arg-type]
        heard=heard,
        missing_after_s=3.0,
        interval_s=0.5,
        on_requeue=lambda: None,
        clock=lambda: now[0],
        deaf_s=health.deaf_s,
    )
    marked: list[str] = []
    _one_follower_stores(monkeypatch, marked, before_answer=lambda: None)
    now[0] = 9.8
    heard.mark("f1")
    now[0] = 18.2  # the first tick after PerfDB is back (the ticks while it was down failed): 8.4 s unheard
    monitor.allowance_s(17.7)  # the previous tick, on time
    asyncio.run(monitor.tick())
    assert marked == []
    for _ in range(6):  # then it really falls silent: 3 s it could be heard in (after 17.8 with the 8 s deaf), missing
        now[0] += 0.5
        asyncio.run(monitor.tick())
        if marked:
            break
    assert (marked, now[0]) == (["f1"], pytest.approx(21.2))
