"""The job lifecycle (leader/lifecycle.py), case by case, with no database: each transition's guard, fields, history
entry and follow-on effects; the refusals; a split job's settlement and a sharded job's owing shards."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from common.errors import Conflict
from common.wire.jobs import JobState
from leader import lifecycle
from leader.lifecycle import CancelOwingShards, CancelParts, Guard, Job, Part, RecordRunTime, SettleSplit, StartSplit, loss_key
from leader.store.jobdocs import applied, change_filter, change_update, lifecycle_job

NOW = datetime(2026, 11, 28, 12, 0, tzinfo=UTC)
Q, A, R = JobState.queued, JobState.assigned, JobState.running
S, F, C = JobState.succeeded, JobState.failed, JobState.cancelled


def running(**values: object) -> Job:
    return replace(Job("j", R, 2, "f1", dispatched=True, started_at=NOW - timedelta(seconds=30)), **values)  # type: ignore[arg-type]


def test_a_queued_job_is_assigned_then_claimed_then_finished_by_its_follower() -> None:
    job = Job("j", Q, 1)
    assign = lifecycle.assign(job, follower_id="f1", now=NOW, estimate_s=12.5, spread_s=1.23456)
    assert assign is not None and assign.guard == Guard(Q, 1)
    assert (assign.state, assign.attempt) == (A, 1)
    assert assign.fields == {
        "follower_id": "f1",
        "dispatched": False,
        "waiting_reason": None,
        "estimate_s": 12.5,
        "estimate_spread_s": 1.235,
    }
    assert (assign.entry.state, assign.entry.follower_id, assign.entry.at) == (A, "f1", NOW)
    job = assign.apply_to(job)
    claim = lifecycle.claim(job, attempt=1, follower_id="f1", now=NOW)
    assert claim.guard == Guard(A, 1, "f1", check_follower=True) and claim.fields == {"dispatched": True}
    assert claim.effects == ()
    job = claim.apply_to(job)
    assert job.started_at == NOW and job.dispatched
    done = lifecycle.finish(job, attempt=1, follower_id="f1", state=S, error=None, elapsed_s=41.23456, now=NOW)
    assert done is not None and done.state == S and done.fields == {"error": None, "actual_s": 41.235}
    assert done.effects == (RecordRunTime(41.235, "f1"),)
    assert done.apply_to(job).finished


def test_an_older_agent_s_run_time_is_the_leader_s_wall_clock_unless_it_stepped_back() -> None:
    job = running()
    done = lifecycle.finish(job, attempt=2, follower_id="f1", state=S, error=None, elapsed_s=None, now=NOW)
    assert done is not None and done.fields["actual_s"] == 30.0 and done.effects == (RecordRunTime(30.0, "f1"),)
    stepped = lifecycle.finish(
        running(started_at=NOW + timedelta(seconds=5)), attempt=2, follower_id="f1", state=S, error=None, elapsed_s=None, now=NOW
    )
    assert stepped is not None and stepped.fields["actual_s"] is None and stepped.effects == ()
    failed = lifecycle.finish(job, attempt=2, follower_id="f1", state=F, error="oom", elapsed_s=9.0, now=NOW)
    assert failed is not None and failed.fields == {"error": "oom", "actual_s": None} and failed.effects == ()
    assert failed.entry.reason == "oom"


def test_a_stale_attempt_is_refused_naming_why() -> None:
    job = running()  # attempt 2 on f1
    with pytest.raises(Conflict, match="attempt 1 is stale: job j is on attempt 2") as refused:
        lifecycle.finish(job, attempt=1, follower_id="f1", state=S, error=None, elapsed_s=1.0, now=NOW)
    assert refused.value.field == "attempt"
    with pytest.raises(Conflict, match="attempt 2 is not held by follower f2"):
        lifecycle.check_running(job, attempt=2, follower_id="f2")
    with pytest.raises(Conflict, match="attempt 1 is stale"):
        lifecycle.claim(replace(job, state=A), attempt=1, follower_id="f1", now=NOW)
    with pytest.raises(Conflict, match="job j is running, not assigned"):
        lifecycle.claim(job, attempt=2, follower_id="f1", now=NOW)  # claimed twice
    lifecycle.check_running(job, attempt=2, follower_id="f1")  # the running attempt's own report is taken


def test_a_repeated_finish_is_a_no_op_and_a_different_one_a_conflict() -> None:
    job = running()
    first = lifecycle.finish(job, attempt=2, follower_id="f1", state=F, error="boom", elapsed_s=None, now=NOW)
    assert first is not None
    ended = first.apply_to(job)
    assert lifecycle.finish(ended, attempt=2, follower_id="f1", state=F, error="boom", elapsed_s=None, now=NOW) is None
    with pytest.raises(Conflict, match="job j is failed, not running"):
        lifecycle.finish(ended, attempt=2, follower_id="f1", state=S, error=None, elapsed_s=None, now=NOW)


def test_a_requeue_after_missed_heartbeats_is_the_next_attempt_on_no_follower() -> None:
    job = running()
    change = lifecycle.requeue(job, reason="follower {follower_id} missed its heartbeats", now=NOW)
    assert change is not None
    assert change.guard == Guard(R, 2, "f1", check_follower=True)  # a no-op if it finished or moved meanwhile
    assert (change.state, change.attempt) == (Q, 3)
    assert change.fields == {"follower_id": None, "dispatched": False, "points_done": 0, "lost_to": []}
    assert (change.entry.attempt, change.entry.reason) == (3, "follower f1 missed its heartbeats")
    requeued = change.apply_to(job)
    # The old attempt's finish is refused from then on; its follower is told to drop it.
    with pytest.raises(Conflict, match="attempt 2 is stale"):
        lifecycle.finish(requeued, attempt=2, follower_id="f1", state=S, error=None, elapsed_s=1.0, now=NOW)
    assert lifecycle.stale_held("f1", [("j", 2)], {"j": requeued}) == ["j"]
    for state in (Q, S, F, C):  # nothing held, nothing to requeue
        assert lifecycle.requeue(replace(job, state=state), reason="x", now=NOW) is None


def test_a_job_that_loses_its_follower_twice_while_running_is_failed_not_requeued() -> None:
    """A job that kills its follower (a model that exhausts its memory) must not walk the fleet killing each one: its
    first lost run is requeued and recorded against that follower process, its second fails it, naming why. A run
    given back (SIGTERM, drained, never delivered) or an attempt lost before it ran counts for nothing."""
    job = running()
    first = lifecycle.requeue(job, reason="follower {follower_id} restarted", now=NOW, lost_to=loss_key("f1", "i1"))
    assert first is not None and (first.state, first.attempt, first.fields["lost_to"]) == (Q, 3, ["f1/i1"])
    again = replace(first.apply_to(job), state=R, follower_id="f2")  # placed and claimed elsewhere
    assert again.lost_to == ("f1/i1",)
    second = lifecycle.requeue(again, reason="follower {follower_id} missed its heartbeats", now=NOW, lost_to="f2/i2")
    assert second is not None and (second.state, second.attempt) == (F, 3)
    assert second.guard == Guard(R, 3, "f2", check_follower=True)
    assert second.fields["error"] == (
        "its follower stopped while running it, twice (last: follower f2 missed its heartbeats); not requeued again: "
        "read the followers' logs"
    )
    given_back = lifecycle.requeue(again, reason="follower {follower_id} stopped (SIGTERM)", now=NOW)
    assert given_back is not None and given_back.state == Q and given_back.fields["lost_to"] == ["f1/i1"]
    not_running = lifecycle.requeue(replace(again, state=A), reason="x", now=NOW, lost_to="f2/i2")
    assert not_running is not None and not_running.state == Q and not_running.fields["lost_to"] == ["f1/i1"]
    assert lifecycle_job({"_id": "j", "state": "running", "attempt": 3, "lost_to": ["f1/i1"]}).lost_to == ("f1/i1",)
    assert loss_key("f3", None) == "f3/?"  # a follower whose incarnation was never known
    part = lifecycle.requeue(replace(again, part_of="split"), reason="x", now=NOW, lost_to="f2/i2")
    assert part is not None and part.state == F and part.effects == (SettleSplit("split"),)  # its split job settles


def test_an_assigned_job_never_sent_goes_back_on_the_same_attempt() -> None:
    job = Job("j", A, 4, "f1", dispatched=False)
    change = lifecycle.unassign(job, reason="the broker refused it", now=NOW)
    assert change is not None and change.guard == Guard(A, 4, dispatched=False)
    assert (change.state, change.attempt, change.fields) == (Q, 4, {"follower_id": None})
    assert lifecycle.unassign(replace(job, dispatched=True), reason="x", now=NOW) is None  # the follower may hold it


@pytest.mark.parametrize("state", [Q, A, R])
@pytest.mark.parametrize("ending", [C, F])
def test_an_unfinished_job_is_cancelled_or_failed_from_any_state(state: JobState, ending: JobState) -> None:
    job = Job("j", state, 3, None if state == Q else "f1", dispatched=state == R)
    change = lifecycle.end(job, state=ending, reason="cancelled by user", now=NOW)
    assert change.guard == Guard(state, 3) and (change.state, change.attempt) == (ending, 3)
    assert change.fields == ({"error": "cancelled by user"} if ending == F else {})
    assert change.effects == () and change.entry.reason == "cancelled by user"
    if state != Q:  # its follower learns on its next heartbeat
        assert lifecycle.stale_held("f1", [("j", 3)], {"j": change.apply_to(job)}) == ["j"]


@pytest.mark.parametrize("state", [S, F, C])
def test_a_finished_job_cannot_be_cancelled(state: JobState) -> None:
    with pytest.raises(Conflict, match=f"job j is already {state.value}") as refused:
        lifecycle.end(Job("j", state, 1), state=C, reason="cancelled by user", now=NOW)
    assert refused.value.field == "state"


def test_cancelling_a_split_job_stops_its_parts_and_a_part_settles_its_job() -> None:
    split = Job("s", R, 1, parts=("s-p0", "s-p1"))
    assert lifecycle.end(split, state=C, reason="stop", now=NOW).effects == (CancelParts(("s-p0", "s-p1"), "stop"),)
    part = Job("s-p1", A, 1, "f1", part_of="s")
    assert lifecycle.end(part, state=C, reason="stop", now=NOW).effects == (SettleSplit("s"),)
    # A part's claim starts the split job, once.
    assert lifecycle.claim(part, attempt=1, follower_id="f1", now=NOW).effects == (StartSplit("s", "s-p1"),)
    start = lifecycle.start_split(Job("s", Q, 1, parts=("s-p0", "s-p1")), part_id="s-p1", now=NOW)
    assert start is not None and start.state == R and start.entry.reason == "part s-p1 started"
    assert lifecycle.start_split(split, part_id="s-p0", now=NOW) is None


def test_a_split_job_settles_once_every_part_has_ended() -> None:
    split = Job("s", R, 1, parts=("s-p0", "s-p1", "s-p2"))
    done = [Part("s-p0", S, 4), Part("s-p1", S, 4), Part("s-p2", S, 2)]
    assert lifecycle.settle(split, [*done[:2], Part("s-p2", R)], now=NOW) is None  # a part still runs
    assert lifecycle.settle(split, done[:2], now=NOW) is None  # a part not read
    ok = lifecycle.settle(split, done, now=NOW)
    assert ok is not None and ok.state == S and ok.fields == {"error": None, "points_done": 10}
    assert ok.guard == Guard(R, 1) and ok.entry.reason == "all 3 parts succeeded"
    assert lifecycle.settle(ok.apply_to(split), done, now=NOW) is None  # exactly once
    failed = lifecycle.settle(split, [Part("s-p2", F, 0, "oom"), Part("s-p0", C), Part("s-p1", S, 4)], now=NOW)
    assert failed is not None and failed.state == F
    assert failed.fields["error"] == "part s-p0 cancelled: no reason given; part s-p2 failed: oom"
    cancelled = lifecycle.settle(split, [Part("s-p0", C), Part("s-p1", S, 4), Part("s-p2", C)], now=NOW)
    assert cancelled is not None and cancelled.state == C and cancelled.fields["error"] is None


def test_a_sharded_job_ends_as_its_coordinator_did_and_cancels_the_shards_that_owe_records() -> None:
    sharded = Job("s", R, 1, parts=("s-p0", "s-p1", "s-p2"), shards=3)
    assert lifecycle.counted_parts(sharded.parts, sharded=True) == ("s-p0",)
    settled = lifecycle.settle(sharded, [Part("s-p0", S, 3), Part("s-p1", C), Part("s-p2", F, 0, "lost")], now=NOW)
    assert settled is not None and settled.state == S and settled.fields == {"error": None, "points_done": 3}
    coordinator = running(job_id="s-p0", attempt=1, part_of="s", shard_index=0, points=3)
    done = lifecycle.finish(coordinator, attempt=1, follower_id="f1", state=S, error=None, elapsed_s=5.0, now=NOW)
    assert done is not None
    assert done.effects == (
        RecordRunTime(5.0, "f1"),
        CancelOwingShards("s", "shard 0 (the coordinator) succeeded"),
        SettleSplit("s"),
    )
    other = running(job_id="s-p1", attempt=1, part_of="s", shard_index=1, points=3)
    shard_done = lifecycle.finish(other, attempt=1, follower_id="f1", state=S, error=None, elapsed_s=5.0, now=NOW)
    assert shard_done is not None and shard_done.effects == (RecordRunTime(5.0, "f1"), SettleSplit("s"))
    # Shard 1 delivered every point's records, shard 2 only one of three: shard 2 is cancelled, shard 0 never.
    assert lifecycle.shards_owing(sharded.parts, {1: {0, 1, 2}, 2: {0}}, points=3) == ["s-p2"]
    assert lifecycle.shards_owing(sharded.parts, {}, points=3) == ["s-p1", "s-p2"]


def test_a_follower_keeps_only_the_attempts_the_leader_still_wants_it_to_run() -> None:
    jobs = {"a": running(job_id="a"), "b": running(job_id="b", follower_id="f2"), "c": running(job_id="c", state=S)}
    held = [("a", 2), ("a", 1), ("b", 2), ("c", 2), ("gone", 1)]
    assert lifecycle.stale_held("f1", held, jobs) == ["a", "b", "c", "gone"]  # a's attempt 1 is stale
    assert lifecycle.stale_held("f1", [("a", 2)], jobs) == []


def test_a_change_is_written_as_one_conditional_update_and_read_back_as_the_lifecycle_sees_it() -> None:
    doc = {
        "_id": "j",
        "state": "running",
        "attempt": 2,
        "follower_id": "f1",
        "dispatched": True,
        "points_total": 3,
        "history": [
            {"state": "running", "attempt": 1, "at": NOW - timedelta(hours=1)},
            {"state": "running", "attempt": 2, "at": NOW - timedelta(seconds=30)},
        ],
    }
    job = lifecycle_job(doc)
    assert job == running(points=3)  # the current attempt's start, not the first's
    change = lifecycle.requeue(job, reason="gone", now=NOW)
    assert change is not None
    assert change_filter(change) == {"_id": "j", "state": "running", "attempt": 2, "follower_id": "f1"}
    update = change_update(change)
    assert update["$set"] == {
        "state": "queued",
        "attempt": 3,
        "updated_at": NOW,
        "follower_id": None,
        "dispatched": False,
        "points_done": 0,
        "lost_to": [],
    }
    assert update["$push"]["history"]["attempt"] == 3 and update["$push"]["history"]["reason"] == "gone"
    after = applied(doc, change)
    assert (
        lifecycle_job(after)
        == change.apply_to(job)
        == replace(job, state=Q, attempt=3, follower_id=None, dispatched=False, started_at=None)
    )
    unassign = lifecycle.unassign(Job("j", A, 1), reason="x", now=NOW)
    assert unassign is not None
    assert change_filter(unassign) == {"_id": "j", "state": "assigned", "attempt": 1, "dispatched": False}
