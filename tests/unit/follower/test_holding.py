"""The follower's durable holding queue: exact SJF with ageing, FCFS baseline, restart durability, withdrawals."""

from __future__ import annotations

from pathlib import Path

from follower.agent.holding import HoldingQueue


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def payload(job_id: str, estimate: float, attempt: int = 1) -> dict:
    return {"job_id": job_id, "attempt": attempt, "estimate_s": estimate, "spec": {"name": job_id}}


def drain(queue: HoldingQueue) -> list[str]:
    order = []
    while (entry := queue.peek()) is not None:
        assert queue.start(entry)
        order.append(entry.job_id)
        queue.done(entry)
    return order


def test_sjf_is_exact_over_every_held_job(tmp_path: Path) -> None:
    clock = Clock()
    queue = HoldingQueue(tmp_path, order="sjf", ageing_per_s=0.0, clock=clock)
    estimates = [30.0, 5.0, 12.5, 12.4, 100.0, 0.5, 7.0]
    for i, estimate in enumerate(estimates):
        queue.accept(payload(f"j{i}", estimate))
    assert [s.estimate_s for s in queue.snapshot()] == sorted(estimates)  # the heartbeat reports run order
    assert drain(queue) == [f"j{i}" for i in sorted(range(len(estimates)), key=lambda i: estimates[i])]


def test_fcfs_baseline_runs_in_arrival_order(tmp_path: Path) -> None:
    clock = Clock()
    queue = HoldingQueue(tmp_path, order="fcfs", clock=clock)
    for i, estimate in enumerate([30.0, 5.0, 12.0]):
        queue.accept(payload(f"j{i}", estimate))
        clock.now += 1
    assert drain(queue) == ["j0", "j1", "j2"]


def test_ageing_lets_a_long_job_overtake_newcomers(tmp_path: Path) -> None:
    clock = Clock()
    queue = HoldingQueue(tmp_path, order="sjf", ageing_per_s=0.1, wait_bound=0.0, clock=clock)  # ageing alone
    queue.accept(payload("long", 100.0))
    # A stream of short jobs keeps arriving; without ageing the long one would wait forever.
    ran = []
    for step in range(2000):
        clock.now += 1.0
        queue.accept(payload(f"s{step}", 5.0))
        entry = queue.peek()
        assert entry is not None and queue.start(entry)
        ran.append(entry.job_id)
        queue.done(entry)
        if entry.job_id == "long":
            break
    assert "long" in ran
    # It waited about (100 - 5) / 0.1 = 950 s of arrivals, not longer.
    assert 900 <= len(ran) <= 1000, len(ran)


def test_held_jobs_survive_an_agent_restart_and_duplicates_are_kept_once(tmp_path: Path) -> None:
    clock = Clock()
    first = HoldingQueue(tmp_path, clock=clock, ageing_per_s=0.0)
    first.accept(payload("a", 20.0))
    first.accept(payload("b", 10.0))
    first.accept(payload("b", 10.0))  # a redelivered message
    assert len(first) == 2
    second = HoldingQueue(tmp_path, clock=clock, ageing_per_s=0.0)
    assert [s.job_id for s in second.snapshot()] == ["b", "a"]
    second.accept(payload("c", 1.0))
    assert drain(second) == ["c", "b", "a"]
    assert list(tmp_path.glob("*.json")) == []


def test_withdrawn_jobs_are_dropped_but_not_the_running_one(tmp_path: Path) -> None:
    queue = HoldingQueue(tmp_path, ageing_per_s=0.0)
    queue.accept(payload("run", 1.0))
    queue.accept(payload("held", 2.0))
    running = queue.peek()
    assert running is not None and queue.start(running)
    assert queue.drop(["run", "held"]) == ["held-1"]
    snap = queue.snapshot()
    assert [(s.job_id, s.running) for s in snap] == [("run", True)]


def test_a_job_overdue_by_its_fcfs_turnaround_runs_next_first_come_first_served(tmp_path: Path) -> None:
    clock = Clock()
    queue = HoldingQueue(tmp_path, order="sjf", ageing_per_s=0.0, wait_bound=1.5, clock=clock)
    queue.accept(payload("first", 10.0))
    first = queue.peek()
    assert first is not None and queue.start(first)
    clock.now += 4.0
    queue.accept(payload("long", 100.0))  # 6 s of the running job left ahead of it: overdue after 1.5 x 106 s
    assert queue.snapshot()[1].job_id == "long"
    [entry] = [e for e in queue._entries.values() if e.job_id == "long"]
    assert entry.ahead_s == 6.0
    queue.done(first)
    ran = []
    for step in range(400):  # short jobs keep arriving, each 1 s apart; one runs per second
        clock.now += 1.0
        queue.accept(payload(f"s{step}", 5.0))
        entry = queue.peek()
        assert entry is not None and queue.start(entry)
        ran.append((entry.job_id, clock.now - entry.accepted_at))
        queue.done(entry)
        if entry.job_id == "long":
            break
    long_wait = dict(ran)["long"]
    assert 159.0 <= long_wait <= 160.0, long_wait  # 1.5 x (6 + 100) s, then the next free start
    # It survives a restart with what was ahead of it.
    late = queue.accept(payload("late", 50.0))
    again = HoldingQueue(tmp_path, wait_bound=1.5, clock=clock)
    assert [e.ahead_s for e in again._entries.values() if e.job_id == "late"] == [late.ahead_s]


def test_a_wall_clock_step_changes_no_order_and_a_restart_keeps_the_wait(tmp_path: Path) -> None:
    mono, wall = Clock(), Clock()
    queue = HoldingQueue(tmp_path, order="sjf", ageing_per_s=0.0, wait_bound=1.0, clock=mono, wall=wall)
    queue.accept(payload("long", 100.0))
    mono.now += 10.0
    wall.now += 10.0
    queue.accept(payload("short", 1.0))
    wall.now += 4 * 3600.0  # the wall clock steps 4 h forward: by it, "long" would be far overdue
    assert [s.job_id for s in queue.snapshot()] == ["short", "long"]
    # A restarted agent measures what was waited before the restart by the wall clock once, then by its own clock.
    mono.now = 5.0
    again = HoldingQueue(tmp_path, order="sjf", ageing_per_s=0.0, wait_bound=1.0, clock=mono, wall=wall)
    assert [s.job_id for s in again.snapshot()] == ["long", "short"]  # now 4 h overdue by the (restart-time) wall clock


def test_priority_classes_run_in_order_and_survive_a_restart(tmp_path: Path) -> None:
    """Urgent before normal before batch, shortest first within a class; a held job keeps its class on disk."""
    clock = Clock()
    queue = HoldingQueue(tmp_path, order="sjf", ageing_per_s=0.0, clock=clock)
    for job_id, estimate, priority in (("b", 1.0, "batch"), ("n2", 20.0, "normal"), ("u", 50.0, "urgent"), ("n1", 10.0, None)):
        spec = {"name": job_id, **({"priority": priority} if priority else {})}  # no class: a task from before classes
        queue.accept({"job_id": job_id, "attempt": 1, "estimate_s": estimate, "spec": spec})
    restarted = HoldingQueue(tmp_path, order="sjf", ageing_per_s=0.0, clock=clock)
    assert drain(restarted) == ["u", "n1", "n2", "b"]
