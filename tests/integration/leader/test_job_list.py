"""The jobs list from the leader's index (leader.store.joblist): a page reads only its own jobs, by id; writes by
another process and deletions show on the next page."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import pytest
from pymongo import AsyncMongoClient, monitoring

from common.wire.jobs import JobFilter
from leader.api import conditional
from leader.store import assignments as assignments_store
from leader.store import joblist
from tests.integration.leader.conftest import ADMIN, Leader


class Finds(monitoring.CommandListener):
    """The `find` commands sent on the jobs collection."""

    def __init__(self) -> None:
        self.finds: list[dict[str, Any]] = []

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        if event.command_name == "find" and event.command["find"] == "jobs":
            self.finds.append(dict(event.command))

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


def test_a_page_reads_only_its_own_jobs_by_id(leader: Leader) -> None:
    """PerfDB's embedded server decodes every candidate of a sorted query: the list once sorted all jobs per page
    (1.7 s for 10,000, bench/leader_load.py). Now the index is read once, and a page is one feed read (the jobs changed
    since) and one read of exactly the page's ids, newest first; no find sorts."""
    leader.upload_model()
    submitted = [leader.submit()["id"] for _ in range(8)]
    listener = Finds()

    async def pages() -> tuple[list[str], list[str], list[dict[str, Any]]]:
        client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(leader.settings.mongo_uri, event_listeners=[listener])
        try:
            db = client[leader.settings.db_name]
            index = joblist.JobIndex()
            first = await joblist.list_jobs(db, index, where=JobFilter(), limit=5)
            built = list(listener.finds)
            listener.finds.clear()
            after = (first[-1].created_at, first[-1].id)
            second = await joblist.list_jobs(db, index, where=JobFilter(), limit=5, after=after)
            return [j.id for j in first], [j.id for j in second], built
        finally:
            await client.close()

    first, second, built = asyncio.run(pages())
    newest_first = submitted[::-1]
    assert first == newest_first[:5] and second == newest_first[5:]
    # Building: the whole index (one query, every job, no filter), then the page by id.
    assert [f["filter"] for f in built] == [{}, {"_id": {"$in": newest_first[:5]}}]
    # The next page: the feed (by updated_at) and the three ids it shows; nothing sorted, nothing else read.
    assert len(listener.finds) == 2, listener.finds
    feed, page = listener.finds
    assert list(feed["filter"]) == ["updated_at"] and page["filter"] == {"_id": {"$in": newest_first[5:]}}
    assert not any("sort" in f for f in [*built, *listener.finds])


def test_writes_by_another_process_and_deletions_show_on_the_next_page(leader: Leader) -> None:
    """A state written by another process (a second leader, an admin script: every job write sets updated_at) is
    in the next page's filter; a job deleted behind the leader's back is left out once its kept view's confirmation
    is due (joblist.CONFIRM_EVERY_S: the leader's clock, a seam here), and the page is still full."""
    now = [0.0]
    leader.client.app.state.resources.jobs_index = joblist.JobIndex(clock=lambda: now[0])
    leader.upload_model()
    jobs = [leader.submit()["id"] for _ in range(5)]

    def listed(query: str) -> list[str]:
        answer = leader.client.get(f"/api/v1/jobs{query}", headers=ADMIN)
        assert answer.status_code == 200, answer.text
        return [j["id"] for j in answer.json()]

    assert listed("?limit=3") == jobs[::-1][:3]  # (the index is built)
    assert listed("?state=cancelled") == []
    leader.db.jobs.update_one({"_id": jobs[1]}, {"$set": {"state": "cancelled", "updated_at": datetime.now(UTC)}})
    assert listed("?state=cancelled") == [jobs[1]]
    assert jobs[1] not in listed("?state=queued")
    leader.db.jobs.delete_one({"_id": jobs[3]})
    shown = listed("?limit=3")  # (its view, if kept, was confirmed on this clock's 0.0: due at CONFIRM_EVERY_S)
    now[0] += joblist.CONFIRM_EVERY_S
    assert listed("?limit=3") == [jobs[4], jobs[2], jobs[1]]
    assert listed("") == [jobs[4], jobs[2], jobs[1], jobs[0]]
    assert shown in ([jobs[4], jobs[3], jobs[2]], [jobs[4], jobs[2], jobs[1]])  # (kept and not yet due, or read whole)


def test_jobs_are_shown_again_without_reading_them_until_they_change(leader: Leader) -> None:
    """A page of jobs is read once; the next page reads the feed and nothing else; one once CONFIRM_EVERY_S has passed
    reads, of an unfinished job, only its updated_at (so one deleted behind the leader's back is noticed); a job
    written since (its updated_at moved: a rename, a waiting reason the placer states) is read again and shown as it
    now is."""
    leader.upload_model()
    jobs = [leader.submit()["id"] for _ in range(4)]
    for job_id in jobs[:3]:
        assert leader.client.post(f"/api/v1/jobs/{job_id}/cancel", headers=ADMIN).status_code == 200
    listener = Finds()

    async def pages() -> list[list[Any]]:
        client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(leader.settings.mongo_uri, event_listeners=[listener])
        try:
            db = client[leader.settings.db_name]
            now = [0.0]
            index = joblist.JobIndex(clock=lambda: now[0])
            out: list[list[Any]] = []
            for step in range(4):
                if step >= 2:
                    now[0] += joblist.CONFIRM_EVERY_S  # (the queued job's kept view is due for confirmation)
                if step == 3:
                    await db.jobs.update_one({"_id": jobs[0]}, {"$set": {"name": "renamed", "updated_at": datetime.now(UTC)}})
                    await assignments_store.set_waiting_reasons(db, job_ids=[jobs[3]], reason="stated since")
                listener.finds.clear()
                listed = await joblist.list_jobs(db, index, where=JobFilter(), limit=10)
                reasons = {j.id: j.waiting_reason for j in listed}
                read = [(f["filter"], f.get("projection")) for f in listener.finds]
                out.append([[j.id for j in listed], {j.id: j.name for j in listed}, read, reasons])
            return out
        finally:
            await client.close()

    first, within, second, third = asyncio.run(pages())
    newest_first = jobs[::-1]
    assert first[0] == within[0] == second[0] == third[0] == newest_first
    assert first[2][-1] == ({"_id": {"$in": newest_first}}, joblist.VIEW_PROJECTION)  # (after the index's first read)
    assert [list(f) for f, _ in within[2]] == [["updated_at"]]  # nothing changed, nothing due: the feed only
    feed, stamp = second[2][0][0], ({"_id": {"$in": [jobs[3]]}}, joblist.STAMP)
    assert list(feed) == ["updated_at"] and second[2][1:] == [stamp]  # nothing changed: the queued one's stamp only
    assert third[2][1:] == [({"_id": {"$in": [jobs[3], jobs[0]]}}, joblist.VIEW_PROJECTION)]  # the feed told: read whole
    assert third[1][jobs[0]] == "renamed" and second[1][jobs[0]] == first[1][jobs[0]] != "renamed"
    assert third[3][jobs[3]] == "stated since" != second[3][jobs[3]]


def test_a_kept_finished_job_deleted_through_any_leader_leaves_every_list(leader: Leader) -> None:
    """A finished job's view is kept and not read again; deleted (through the API, or by retention: both leave a
    tombstone), it leaves the list at once, in this leader's index and in another's reading the same database."""
    leader.upload_model()
    jobs = [leader.submit()["id"] for _ in range(3)]
    for job_id in jobs:
        assert leader.client.post(f"/api/v1/jobs/{job_id}/cancel", headers=ADMIN).status_code == 200

    def listed() -> list[str]:
        answer = leader.client.get("/api/v1/jobs", headers=ADMIN)
        assert answer.status_code == 200, answer.text
        return [j["id"] for j in answer.json()]

    async def other_leader(index: joblist.JobIndex) -> list[str]:
        client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(leader.settings.mongo_uri)
        try:
            return [j.id for j in await joblist.list_jobs(client[leader.settings.db_name], index, where=JobFilter(), limit=10)]
        finally:
            await client.close()

    other = joblist.JobIndex()
    assert listed() == listed() == asyncio.run(other_leader(other)) == jobs[::-1]  # (views kept in both)
    assert leader.client.delete(f"/api/v1/jobs/{jobs[1]}", headers=ADMIN).status_code == 200
    assert listed() == asyncio.run(other_leader(other)) == [jobs[2], jobs[0]]


def test_a_reader_with_the_current_list_gets_304_until_a_job_changes(leader: Leader, monkeypatch: pytest.MonkeyPatch) -> None:
    """Conditional GETs (leader/api/conditional.py): the list's ETag, sent back in If-None-Match, is answered 304
    with no body while nothing changed; a submission, or a write by another process, changes it; another filter has
    its own."""
    monkeypatch.setattr(conditional, "STALE_AFTER_S", 1e9)  # (the clock's own window never ticks mid-test)
    leader.upload_model()
    first = leader.submit()["id"]
    # The placer states why it waits (no follower), which moves the job: the list is current once it has.
    leader.wait_for(first, lambda v: v["waiting_reason"] is not None)
    answer = leader.client.get("/api/v1/jobs", headers=ADMIN)
    assert answer.status_code == 200 and [j["id"] for j in answer.json()][:1] == [first]
    tag = answer.headers["ETag"]
    assert tag.startswith('W/"') and answer.headers["Cache-Control"] == "private, no-cache"

    again = leader.client.get("/api/v1/jobs", headers={**ADMIN, "If-None-Match": tag})
    assert (again.status_code, again.content, again.headers["ETag"]) == (304, b"", tag)
    other_filter = leader.client.get("/api/v1/jobs?state=queued", headers={**ADMIN, "If-None-Match": tag})
    assert other_filter.status_code == 200 and other_filter.headers["ETag"] != tag

    second = leader.submit()["id"]
    changed = leader.client.get("/api/v1/jobs", headers={**ADMIN, "If-None-Match": tag})
    assert changed.status_code == 200 and [j["id"] for j in changed.json()][:2] == [second, first]
    tag = changed.headers["ETag"]
    leader.db.jobs.update_one({"_id": first}, {"$set": {"state": "cancelled", "updated_at": datetime.now(UTC)}})
    behind = leader.client.get("/api/v1/jobs", headers={**ADMIN, "If-None-Match": tag})
    assert behind.status_code == 200 and {j["id"]: j["state"] for j in behind.json()}[first] == "cancelled"
