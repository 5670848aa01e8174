"""The Jobs page's queue table (leader.placement.queueinfo): the queue's order and the positions and starts along it
are made at most once a second however often the book changes (the order is the table's cost: about 40 ms for 10,000
queued jobs; the bench's followers, which never take what they are sent, change the book several times a second);
a job placed while the order awaits PerfDB leaves its place (the bench's room of readers once found a page failing
with 500 there: the job was gone from the book's kinds)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import pytest

from common.wire.jobs import JobView
from leader.domain import Candidate, QueuedJob
from leader.placement import queueinfo
from leader.placement.book import JobBook
from leader.placement.queueinfo import QueueInfo
from tests.unit.leader.test_book import doc
from tests.unit.leader.test_jobs_json import queued_view


class Sharing:
    """Sharing's seam: the order submission order, counted; with `tick`, while the order is being made (it awaits
    PerfDB), the placer's tick places the first job."""

    def __init__(self, *, tick: bool = False) -> None:
        self.generation, self.orders, self.tick = 0, 0, tick

    async def order(self, batch: list[QueuedJob], book: JobBook, followers: int) -> list[QueuedJob]:
        self.orders += 1
        await asyncio.sleep(0)
        if self.tick:
            book.apply(doc(batch[0].job_id, "assigned", follower="f1"))
        return batch  # (as Sharing.order may: it filtered the batch before its awaits)


class Placer:
    def __init__(self, book: JobBook, sharing: Sharing) -> None:
        self.book, self.sharing, self.lookahead = book, sharing, 4
        self.candidates = [Candidate("f1", frozenset({"onnxruntime"}))]


def test_a_job_placed_while_the_order_is_made_leaves_its_place_at_once() -> None:
    book = JobBook()
    book.apply_all(doc(job_id, "queued", estimate=10.0, age=age) for age, job_id in enumerate(("a", "b", "c")))
    placer = Placer(book, Sharing(tick=True))

    async def positions() -> list[int | None]:
        return [(await QueueInfo(None, placer).fill(queued_view(j))).queue_position for j in ("a", "c")]  # type: ignore[arg-type]

    # Ordered [a, b, c]; the tick placed a meanwhile: the table is of the book as it is.
    assert asyncio.run(positions()) == [None, 2]


def test_the_table_is_made_at_most_once_a_second_whatever_the_book_does(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [0.0]
    monkeypatch.setattr(queueinfo, "_clock", lambda: now[0])
    book = JobBook()
    book.apply_all(doc(job_id, "queued", estimate=10.0, age=age) for age, job_id in enumerate(("a", "b", "c")))
    sharing = Sharing()
    placer = Placer(book, sharing)

    def places(*ids: str) -> list[tuple[int | None, float | None]]:
        async def fill() -> list[JobView]:
            return [await QueueInfo(None, placer).fill(queued_view(j)) for j in ids]  # type: ignore[arg-type]

        out = []
        for filled in asyncio.run(fill()):
            start = filled.estimated_start
            out.append((filled.queue_position, None if start is None else round((start - datetime.now(UTC)).total_seconds(), 1)))
        return out

    assert places("a", "b", "c") == [(1, 0.0), (2, 10.0), (3, 20.0)] and sharing.orders == 1
    book.apply(doc("a", "assigned", follower="f1", estimate=10.0))  # placed: b and c keep the table's places until the next
    book.apply(doc("d", "queued", estimate=10.0, age=9))  # submitted: no place until the next table
    now[0] += 0.5  # half a second on: the same table, its starts half a second nearer
    assert places("b", "c", "d") == [(2, 9.5), (3, 19.5), (None, None)] and sharing.orders == 1
    assert places("a") == [(None, None)]  # (a job that left the queue has no place in it at once)
    now[0] += queueinfo.TABLE_TTL_S
    assert places("b", "c", "d") == [(1, 10), (2, 20), (3, 30)] and sharing.orders == 2
    sharing.generation += 1  # an admin changed a team's settings: ordered again at once
    assert places("d") == [(3, 30)] and sharing.orders == 3
