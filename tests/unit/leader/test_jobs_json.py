"""The jobs list's JSON (leader.api.paging.jobs_json): byte for byte what the route's response model writes, each job
written once per change of what its view is made of."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from pydantic import TypeAdapter

from common.spec.parse import parse_spec
from common.wire.jobs import JobView
from leader.api import paging

SPEC = {"name": "j", "model": "m:1", "load": {"rate": 10}}


def queued_view(job_id: str, **update: object) -> JobView:
    """A queued job's view (what the jobs list shows), with `update` applied."""
    now = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
    job = JobView(
        id=job_id,
        name="j",
        state="queued",
        attempt=1,
        follower_id=None,
        spec=parse_spec(SPEC),
        model_ref="m:1",
        points_total=1,
        points_done=0,
        estimate_s=10.0,
        created_at=now,
        updated_at=now,
        history=[],
    )
    return job.model_copy(update=update)


def test_the_page_is_what_the_response_model_writes_and_each_change_is_written_again() -> None:
    jobs = [queued_view("a"), queued_view("b", waiting_reason="needs backends tfserving")]
    assert paging.jobs_json(jobs) == TypeAdapter(list[JobView]).dump_json(jobs, by_alias=True)
    assert paging.jobs_json([]) == b"[]"
    # What changes a job's view without moving its updated_at (a reason, a split job's parts' progress, the queue's
    # figures) is written again, not served from before.
    later = datetime(2026, 11, 29, 12, 1, tzinfo=UTC)
    for changed in (
        queued_view("a", waiting_reason="awaiting an admin's approval"),
        queued_view("a", points_done=1),
        queued_view("a", queue_position=3, estimated_start=later),
        queued_view("a", updated_at=later + timedelta(seconds=1), name="renamed"),
    ):
        assert paging.jobs_json([changed]) == TypeAdapter(list[JobView]).dump_json([changed], by_alias=True)
