"""Raw per-request records of a point: the follower uploads one npz blob, users download it."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request, Response

from common.errors import InvalidSpec, NotFound
from leader.api.body import check_records_blob, read_limited
from leader.api.deps import Db, FollowerPrincipal, JobId, Viewer, check_follower
from leader.store import jobs as jobs_store
from leader.store import records as records_store

router = APIRouter(prefix="/jobs", tags=["records"])

MAX_RECORDS_BYTES = 64 * 1024 * 1024
NPZ_TYPE = "application/octet-stream"


@router.post("/{job_id}/points/{index}/records", status_code=204)
async def upload_records(
    job_id: str,
    index: int,
    request: Request,
    db: Db,
    principal: FollowerPrincipal,
    attempt: Annotated[int, Query(ge=1)],
    probe: Annotated[int | None, Query(ge=0, le=records_store.MAX_PROBE)] = None,
) -> Response:
    """Store (or replace) the records blob of a point of the running attempt (or of one probe of its search); 409 for
    a stale attempt."""
    job = await jobs_store.get_job(db, job_id=job_id)
    follower_id = job.follower_id or ""
    check_follower(principal, follower_id)
    job = await jobs_store.running_attempt(db, job_id=job_id, attempt=attempt, follower_id=follower_id)
    if not 0 <= index < job.points_total:
        raise InvalidSpec(f"point index must be in [0, {job.points_total})", field="index")
    data = await read_limited(request, MAX_RECORDS_BYTES)
    check_records_blob(data)
    await records_store.save_records(db, job_id=job_id, attempt=attempt, index=index, data=data, probe=probe)
    return Response(status_code=204)


@router.get("/{job_id}/points/{index}/records")
async def download_records(
    job_id: JobId,
    index: int,
    db: Db,
    viewer: Viewer,
    attempt: Annotated[int | None, Query(ge=1)] = None,
    probe: Annotated[int | None, Query(ge=0, le=records_store.MAX_PROBE)] = None,
) -> Response:
    """The records blob of a point (of the job's current attempt unless `attempt` is given; of one probe of its
    search with `probe`); 404 when none."""
    job = await jobs_store.get_job(db, job_id=job_id, team=viewer.scope)
    chosen = attempt or job.attempt
    data = await records_store.load_records(db, job_id=job_id, attempt=chosen, index=index, probe=probe)
    if data is None and job.records_expired_at is not None:
        when = job.records_expired_at.strftime("%Y-%m-%d %H:%M UTC")
        raise NotFound(f"the raw records of job {job_id} were removed by retention on {when}; its results stay", field="index")
    if data is None:
        of = "" if probe is None else f" probe {probe}"
        raise NotFound(f"no records for point {index}{of} of job {job_id} attempt {chosen}", field="index")
    name = f"{job_id}-{chosen}-{index}" + ("" if probe is None else f"-probe-{probe}")
    return Response(content=data, media_type=NPZ_TYPE, headers={"Content-Disposition": f'attachment; filename="{name}.npz"'})
