"""The Jobs page's queue table (leader.placement.queueinfo): made from one state of the placer's book, even when the
placer's tick changes the book while the table's ordering awaits (the bench's room of readers found a page failing
with 500 there: a job placed meanwhile was gone from the book's kinds)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

from common.spec.parse import parse_spec_yaml
from common.wire.jobs import JobState, JobView
from leader.domain import Candidate, QueuedJob
from leader.placement.book import JobBook
from leader.placement.queueinfo import QueueInfo
from tests.unit.leader.test_book import doc

SPEC = "name: q\nmodel: m:1\nbackends: [onnxruntime]\nload: {rate: 10, duration: 1s}\n"


class TickMeanwhile:
    """Sharing's seam: while the order is being made (it awaits PerfDB), the placer's tick places the first job."""

    def __init__(self) -> None:
        self.generation = 0

    async def order(self, batch: list[QueuedJob], book: JobBook, followers: int) -> list[QueuedJob]:
        await asyncio.sleep(0)
        book.apply(doc(batch[0].job_id, "assigned", follower="f1"))
        return batch  # (as Sharing.order may: it filtered the batch before its awaits)


class Placer:
    def __init__(self, book: JobBook) -> None:
        self.book, self.sharing, self.lookahead = book, TickMeanwhile(), 4
        self.candidates = [Candidate("f1", frozenset({"onnxruntime"}))]


def view(job_id: str) -> JobView:
    now = datetime.now(UTC)
    return JobView(
        id=job_id,
        name="q",
        state=JobState.queued,
        attempt=1,
        follower_id=None,
        spec=parse_spec_yaml(SPEC),
        model_ref="m:1",
        points_total=1,
        points_done=0,
        estimate_s=10.0,
        created_at=now,
        updated_at=now,
        history=[],
    )


def test_a_job_placed_while_the_table_is_made_leaves_the_table_of_the_book_it_was_made_from() -> None:
    book = JobBook()
    book.apply_all(doc(job_id, "queued", estimate=10.0, age=age) for age, job_id in enumerate(("a", "b", "c")))

    async def positions() -> list[int | None]:
        first = await QueueInfo(None, Placer(book)).fill(view("c"))  # type: ignore[arg-type]
        second = await QueueInfo(None, Placer(book)).fill(view("c"))  # type: ignore[arg-type]
        return [first.queue_position, second.queue_position]

    # The first table is of the book as it was read (a ahead of b and c); the tick placed a meanwhile, so the
    # book's version moved and the next table has c second.
    assert asyncio.run(positions()) == [3, 2]
