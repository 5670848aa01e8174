"""A waiting reason stated for many queued jobs at once (leader.store.assignments.set_waiting_reasons) is written in
commands of at most IDS_PER_READ ids: PerfDB's embedded server pays O(n^2) for an `$in` of n ids, and one write of 500
stalled it 1.5 s, every heartbeat and submission behind it."""

from __future__ import annotations

import asyncio
from typing import Any

from pymongo import AsyncMongoClient, monitoring

from leader.store import assignments as assignments_store
from leader.store.lookup import IDS_PER_READ
from tests.integration.leader.conftest import Leader


class Updates(monitoring.CommandListener):
    """The ids of each `update` command's filter on the jobs collection, and how many jobs each matched."""

    def __init__(self) -> None:
        self.ids: list[list[str]] = []
        self.matched: list[int] = []

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        if event.command_name == "update" and event.command["update"] == "jobs":
            self.ids.extend(list(u["q"]["_id"]["$in"]) for u in event.command["updates"])

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        if event.command_name == "update":
            self.matched.append(event.reply["n"])

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


def test_a_reason_for_many_jobs_is_written_twenty_ids_a_command(leader: Leader) -> None:
    leader.upload_model()
    jobs = [leader.submit()["id"] for _ in range(2 * IDS_PER_READ + 5)]
    listener = Updates()

    async def state() -> None:
        client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(leader.settings.mongo_uri, event_listeners=[listener])
        try:
            await assignments_store.set_waiting_reasons(client[leader.settings.db_name], job_ids=jobs, reason="stated")
        finally:
            await client.close()

    asyncio.run(state())
    assert listener.ids == [jobs[:IDS_PER_READ], jobs[IDS_PER_READ : 2 * IDS_PER_READ], jobs[2 * IDS_PER_READ :]]
    assert listener.matched == [IDS_PER_READ, IDS_PER_READ, 5]  # (every job queued: each written; the placer may state
    # its own reason again afterwards, so the documents are not read back here)
