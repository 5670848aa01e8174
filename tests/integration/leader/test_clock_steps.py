"""A step of the leader's wall clock changes no decision (#17): placement, liveness, lost dispatches, durations.

The wall clock is injected where the leader reads it (`leader.clock.utcnow`, which every module imports); its
monotonic clock runs on untouched, as the kernel's does when NTP or an operator steps the time.
"""

from __future__ import annotations

import sys
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta

import pytest

from leader import clock
from tests.integration.leader.conftest import ADMIN, Leader, point_result
from tests.integration.leader.test_scheduling import claim, fid, post_as

FOUR_HOURS = timedelta(hours=4)


class SteppedWall:
    """The leader's wall clock, `offset` away from the real one."""

    def __init__(self) -> None:
        self.offset = timedelta(0)
        self._real = clock.utcnow

    def __call__(self) -> datetime:
        return self._real() + self.offset


@pytest.fixture
def wall(monkeypatch: pytest.MonkeyPatch) -> Iterator[SteppedWall]:
    real, stepped = clock.utcnow, SteppedWall()
    for name, module in list(sys.modules.items()):
        if (name == "leader" or name.startswith("leader.")) and getattr(module, "utcnow", None) is real:
            monkeypatch.setattr(module, "utcnow", stepped)
    yield stepped


def _hold_for(seconds: float, beat: Callable[[], object]) -> None:
    """Heartbeat every 0.2 s for `seconds` (the monitor ticks every 0.2 s meanwhile)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        beat()
        time.sleep(0.2)


def test_after_a_step_back_a_new_job_is_placed_at_once(make_leader: Callable[..., Leader], wall: SteppedWall) -> None:
    leader = make_leader()  # the placer's full resync stays at its 600 s default: the change feed must do it
    leader.upload_model()
    first, idle = fid(), fid()
    leader.register(first)
    leader.wait_dispatched(leader.submit()["id"])
    wall.offset = -FOUR_HOURS
    leader.register(idle)
    job = leader.submit()  # stamped 4 h before everything the placer has read
    placed = leader.wait_dispatched(job["id"], timeout=10)  # was: queued until the 600 s resync (8 min 50 s seen)
    assert placed["follower_id"] in (first, idle)


def test_a_step_forward_neither_marks_a_live_follower_missing_nor_requeues_its_jobs(
    make_leader: Callable[..., Leader], wall: SteppedWall
) -> None:
    leader = make_leader(missing_after_s=1.5, undelivered_after_s=5.0)
    leader.upload_model()
    running_on, sent_to = fid(), fid()
    incarnations = {f: uuid.uuid4().hex for f in (running_on, sent_to)}
    for follower in (running_on, sent_to):
        leader.register(follower, incarnations[follower])
    running = leader.submit()
    first = leader.wait_dispatched(running["id"])["follower_id"]
    assert claim(leader, running["id"], 1, first, incarnations[first]).status_code == 200
    other = sent_to if first == running_on else running_on
    waiting = leader.submit()
    assert leader.wait_dispatched(waiting["id"])["follower_id"] in (first, other)

    wall.offset = FOUR_HOURS
    time.sleep(0.5)  # monitor ticks see the stepped clock before any heartbeat is stamped with it

    def beat() -> None:
        for follower in (first, other):
            body = {"incarnation": incarnations[follower], "state": "busy" if follower == first else "ready",
                    "running_job": running["id"] if follower == first else None,
                    "held": [{"job_id": running["id"], "attempt": 1, "estimate_s": 5.0, "running": True}]
                    if follower == first else []}  # fmt: skip
            answer = leader.client.post(f"/api/v1/followers/{follower}/heartbeat", headers=leader.as_follower(follower),
                                        json=body)  # fmt: skip
            assert answer.status_code == 200 and answer.json()["known"], answer.text

    _hold_for(2.0, beat)  # longer than missing_after_s; shorter than undelivered_after_s by the monotonic clock
    assert leader.job(running["id"])["state"] == "running" and leader.job(running["id"])["attempt"] == 1
    assert leader.job(waiting["id"])["attempt"] == 1  # a job sent 3 s ago is not "lost" because the wall moved 4 h
    views = leader.client.get("/api/v1/followers", headers=ADMIN).json()
    states = {view["info"]["follower_id"]: view["state"] for view in views}
    assert "missing" not in (states[first], states[other])


def test_a_silent_follower_is_still_found_missing_by_the_monotonic_clock(make_leader: Callable[..., Leader],
                                                                         wall: SteppedWall) -> None:  # fmt: skip
    leader = make_leader(missing_after_s=1.0)
    silent, incarnation = fid(), uuid.uuid4().hex
    leader.register(silent, incarnation)
    wall.offset = -FOUR_HOURS  # a step back must not keep a silent follower alive either
    deadline = time.monotonic() + 10
    while True:
        views = leader.client.get("/api/v1/followers", headers=ADMIN).json()
        if any(v["info"]["follower_id"] == silent and v["state"] == "missing" for v in views):
            break
        assert time.monotonic() < deadline, "the silent follower was never marked missing"
        time.sleep(0.1)


def _running_job(leader: Leader) -> tuple[dict[str, object], str]:
    """A job claimed by a fresh follower (running), and that follower."""
    leader.upload_model()
    follower, incarnation = fid(), uuid.uuid4().hex
    leader.register(follower, incarnation)
    job = leader.submit()
    leader.wait_dispatched(job["id"])
    assert claim(leader, job["id"], 1, follower, incarnation).status_code == 200
    return job, follower


def _report_points(leader: Leader, job: dict[str, object], follower: str, then: Callable[[], None]) -> None:
    """Report both points of the job, calling `then` after each."""
    for index in (0, 1):
        report = {"attempt": 1, "follower_id": follower, "result": point_result(index, follower)}
        assert post_as(leader, follower, f"/api/v1/jobs/{job['id']}/points", report).status_code == 200
        then()


@pytest.mark.parametrize("step", [-FOUR_HOURS, FOUR_HOURS])
def test_a_jobs_duration_comes_from_the_followers_monotonic_clock(leader: Leader, wall: SteppedWall, step: timedelta) -> None:
    job, follower = _running_job(leader)
    wall.offset = step
    _report_points(leader, job, follower, then=lambda: None)
    finish = {"attempt": 1, "follower_id": follower, "state": "succeeded", "elapsed_s": 10.0}
    assert post_as(leader, follower, f"/api/v1/jobs/{job['id']}/finish", finish).status_code == 200
    assert leader.job(job["id"])["actual_s"] == 10.0  # was 7,218 s and −14,386 s for 10 s jobs


def test_an_agent_without_elapsed_s_and_a_step_back_teaches_nothing(leader: Leader, wall: SteppedWall) -> None:
    job, follower = _running_job(leader)

    def step_back() -> None:
        wall.offset = -FOUR_HOURS  # the clock steps back while the job runs

    _report_points(leader, job, follower, then=step_back)
    finish = {"attempt": 1, "follower_id": follower, "state": "succeeded"}
    assert post_as(leader, follower, f"/api/v1/jobs/{job['id']}/finish", finish).status_code == 200
    assert leader.job(job["id"])["actual_s"] is None  # a negative wall-clock duration is not a duration
    assert leader.db.durations.count_documents({}) == 0
