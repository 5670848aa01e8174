"""Live progress of a job: the windows its follower streams over gRPC (leader.telemetry) while points run."""

from __future__ import annotations

from fastapi import APIRouter

from common.wire.progress import JobProgress, PointProgress
from leader.api.deps import Db, JobId, Viewer
from leader.store import jobs as jobs_store
from leader.store import progress as progress_store

router = APIRouter(prefix="/jobs", tags=["jobs"])


@router.get("/{job_id}/progress", response_model=JobProgress)
async def job_progress(job_id: JobId, db: Db, viewer: Viewer) -> JobProgress:
    """The latest measurement windows of each point of the job's current attempt (404 for an unknown job)."""
    job = await jobs_store.get_job(db, job_id=job_id, team=viewer.scope)
    doc = await progress_store.get_progress(db, job_id=job_id)
    state = str(getattr(job.state, "value", job.state))
    if doc is None:
        return JobProgress(job_id=job_id, state=state)
    points = sorted((PointProgress.model_validate(p) for p in doc.get("points", {}).values()), key=lambda p: p.index)
    return JobProgress(
        job_id=job_id,
        state=state,
        attempt=doc.get("attempt"),
        follower_id=doc.get("follower_id"),
        points=points,
        updated_at=doc.get("updated_at"),
        dropped=int(doc.get("dropped", 0)),
    )
