"""Leader metrics from the placer's in-memory book: queue gauges and job counts agree with PerfDB's own aggregates."""

from __future__ import annotations

import re
import time

import pytest

from tests.integration.leader.conftest import Leader

pytestmark = pytest.mark.integration


def gauge(text: str, name: str, label: str, value: str) -> float | None:
    match = re.search(rf'^{name}\{{{label}="{re.escape(value)}"\}} (\S+)$', text, re.M)
    return float(match.group(1)) if match else None


def test_queue_and_state_gauges_come_from_the_book(leader: Leader) -> None:
    leader.upload_model()
    leader.register("fm1")
    jobs = [leader.submit()["id"] for _ in range(2)]
    for job_id in jobs:
        leader.wait_dispatched(job_id)
    placer = leader.client.app.state.resources.placer  # type: ignore[attr-defined]
    assert placer.book is not None and placer.book.loads["fm1"].jobs == 2
    expected_s = sum(doc["estimate_s"] for doc in leader.db.jobs.find({"_id": {"$in": jobs}}, {"estimate_s": 1}))
    deadline = time.monotonic() + 15
    while True:  # the refresh task runs every 2 s: wait for the first one after the placements
        text = leader.client.get("/metrics").text
        if gauge(text, "benchfleet_leader_follower_queue_jobs", "follower_id", "fm1") == 2 or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert gauge(text, "benchfleet_leader_follower_queue_jobs", "follower_id", "fm1") == 2, text
    assert gauge(text, "benchfleet_leader_follower_queue_seconds", "follower_id", "fm1") == pytest.approx(expected_s)
    assert gauge(text, "benchfleet_leader_jobs", "state", "assigned") == 2
    assert gauge(text, "benchfleet_leader_jobs", "state", "queued") == 0
    assert gauge(text, "benchfleet_leader_jobs", "state", "succeeded") == 0
