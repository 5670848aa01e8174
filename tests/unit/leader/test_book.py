"""The placer's JobBook: loads and the queue follow job documents exactly, whatever order and repetition they come in."""

from __future__ import annotations

import dataclasses
import random
from datetime import UTC, datetime, timedelta
from typing import Any

from leader.domain import JobChange, Load, Needs
from leader.placement.book import JobBook
from leader.store.jobdocs import job_change

T0 = datetime(2026, 1, 1, tzinfo=UTC)
CPU = (frozenset({"onnxruntime"}), Needs())


def doc(job_id: str, state: str, *, follower: str | None = None, estimate: float = 10.0, age: int = 0, **extra: Any) -> JobChange:
    """A job document as PerfDB holds it, through the store's one mapper (the book never sees raw documents)."""
    return job_change({
        "_id": job_id,
        "state": state,
        "attempt": 1,
        "follower_id": follower,
        "dispatched": True,
        "estimate_s": estimate,
        "base_estimate_s": estimate,
        "created_at": T0 + timedelta(seconds=age),
        "spec": {"backends": ["onnxruntime"], "requires": {}},
        "owner": "ann",
        **extra,
    })


def test_loads_follow_transitions_and_repeats_change_nothing() -> None:
    book = JobBook()
    book.apply(doc("a", "assigned", follower="f1", estimate=5.0))
    book.apply(doc("b", "running", follower="f1", estimate=7.0))
    book.apply(doc("b", "running", follower="f1", estimate=7.0))  # the feed's overlap reads it again
    assert book.loads == {"f1": Load(12.0, 2)}
    book.apply(doc("a", "succeeded", follower="f1"))
    assert book.loads == {"f1": Load(7.0, 1)}
    book.apply(doc("b", "queued", attempt=2))  # requeued: off the follower, back in the queue
    assert book.loads == {} and list(book.queued) == ["b"]
    assert book.owner_waiting == {"ann": 1}


def test_oldest_is_submission_order_and_restore_keeps_what_is_still_queued() -> None:
    book = JobBook()
    ages = list(range(50))
    random.Random(1).shuffle(ages)
    for age in ages:
        book.apply(doc(f"j{age:02d}", "queued", age=age))
    first = book.oldest(CPU, 10)
    assert [j.job_id for j in first] == [f"j{k:02d}" for k in range(10)]
    book.apply(doc("j00", "cancelled"))
    book.placed(first[1], "f1", 3.0)
    book.restore(first)
    again = book.oldest(CPU, 3)
    assert [j.job_id for j in again] == ["j02", "j03", "j04"]
    assert book.loads == {"f1": Load(3.0, 1)} and book.undispatched() == ["j01"]
    book.dispatched("j01")
    assert book.undispatched() == []


def test_waiting_reasons_are_written_once_per_change() -> None:
    book = JobBook()
    for k in range(5):
        book.apply(doc(f"g{k}", "queued", age=k))
    ids = book.to_state(CPU, "needs a GPU", 3)
    assert len(ids) == 3
    book.stated(CPU, "needs a GPU", ids)
    rest = book.to_state(CPU, "needs a GPU", 10)
    assert sorted(rest + ids) == [f"g{k}" for k in range(5)]
    book.stated(CPU, "needs a GPU", rest)
    assert book.to_state(CPU, "needs a GPU", 10) == []
    # A restarted leader reads the stored reasons: nothing to write again.
    fresh = JobBook()
    for k in range(5):
        fresh.apply(doc(f"g{k}", "queued", age=k, waiting_reason="needs a GPU"))
    assert fresh.to_state(CPU, "needs a GPU", 10) == []


def test_a_stated_reason_keeps_the_jobs_team_class_and_measured_seconds() -> None:
    """The fair order reads a waiting job's team and class: stating why it waits must not lose them."""
    book = JobBook()
    spec = {"backends": ["onnxruntime"], "requires": {}, "priority": "urgent"}
    book.apply(doc("u", "queued", team="red", measured_s=4.0, spec=spec))
    (before,) = book.oldest(CPU, 1)
    book.restore([before])
    book.stated(CPU, "needs a GPU", book.to_state(CPU, "needs a GPU", 10))
    (after,) = book.oldest(CPU, 1)
    assert (after.team, after.priority, after.measured_s, after.waiting_reason) == ("red", "urgent", 4.0, "needs a GPU")
    assert after == dataclasses.replace(before, waiting_reason="needs a GPU")


def test_a_split_job_is_never_queued_and_its_parts_know_their_siblings_followers() -> None:
    book = JobBook()
    book.apply(doc("j", "queued", parts=["j-p0", "j-p1"]))
    book.apply(doc("j-p0", "queued", part_of="j"))
    book.apply(doc("j-p1", "queued", part_of="j", age=1))
    assert set(book.queued) == {"j-p0", "j-p1"}, "the split job itself is never placed"
    assert [job.part_of for job in book.oldest(CPU, 10)] == ["j", "j"]
    assert book.sibling_follower("j") is None
    book.apply_placed("j-p0", "f2", 10.0, part_of="j")
    assert book.sibling_follower("j") == "f2"
    book.apply(doc("j-p0", "succeeded", follower="f2", part_of="j"))
    assert book.sibling_follower("j") is None and book.loads == {}
    book.apply(doc("j", "running", parts=["j-p0", "j-p1"]))  # running, with no follower: no load anywhere
    assert book.loads == {} and "j" not in book.active


def test_each_team_counts_the_followers_that_run_its_jobs_or_start_one_now() -> None:
    book = JobBook()
    book.apply(doc("r1", "running", follower="f1", team="red"))
    book.apply(doc("b1", "assigned", follower="f1", team="blue"))  # held behind red's: not counted
    book.apply(doc("b2", "assigned", follower="f2", team="blue"))  # f2 runs nothing: it starts blue's job at once
    assert book.running_by_team() == {"red": 1, "blue": 1}
    assert not book.runs_nothing("f1") and not book.runs_nothing("f2") and book.runs_nothing("f3")
    book.apply(doc("r1", "succeeded", follower="f1", team="red"))
    assert book.running_by_team() == {"blue": 2}


def test_the_jobs_sent_to_a_follower_are_known_without_reading_them() -> None:
    """A heartbeat asks which of the follower's jobs were sent and not yet claimed (lost messages are judged among
    them): from the book, with their attempts, as jobs are placed, sent, claimed, requeued and moved."""
    book = JobBook()
    book.apply(doc("a", "assigned", follower="f1", attempt=2))
    book.apply(doc("b", "assigned", follower="f1", dispatched=False))
    book.apply(doc("c", "running", follower="f1"))
    book.apply(doc("d", "assigned", follower="f2"))
    assert sorted(book.sent_to("f1")) == [("a", 2)] and book.sent_to("f2") == [("d", 1)] and book.sent_to("f3") == []
    book.dispatched("b")
    assert sorted(book.sent_to("f1")) == [("a", 2), ("b", 1)]
    book.apply(doc("a", "running", follower="f1", attempt=2))  # claimed
    book.apply(doc("d", "queued", attempt=2))  # requeued
    assert book.sent_to("f1") == [("b", 1)] and book.sent_to("f2") == [] and "f2" not in book.on_follower
    book.apply_placed("d", "f1", 5.0, attempt=2)
    assert book.sent_to("f1") == [("b", 1)]  # placed, not yet sent
    book.dispatched("d")
    assert sorted(book.sent_to("f1")) == [("b", 1), ("d", 2)]
