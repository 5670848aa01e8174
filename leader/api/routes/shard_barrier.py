"""A sharded job's coordination, for its followers: the leader's clock (each follower measures its offset to it),
the barrier that starts every shard of a point at one instant, each shard's records, and for the coordinator (shard
0) which shards delivered and which were lost."""

from __future__ import annotations

import time
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, Response
from pydantic import ValidationError

from common.errors import InvalidSpec
from common.wire.jobs import JobState, JobView
from common.wire.shards import BarrierAnswer, PointShards, ShardArrival, ShardFigures, ShardState
from leader.api.body import check_records_blob, read_limited
from leader.api.deps import Db, FollowerPrincipal, Reader, check_follower
from leader.auth.tokens import Principal
from leader.store import jobs as jobs_store
from leader.store import shard_points as shard_points_store

router = APIRouter(tags=["shards"])

# A shard's records live in one PerfDB document (16 MiB at most).
MAX_SHARD_RECORDS_BYTES = 15 * 1024 * 1024


@router.get("/clock")
async def clock() -> dict[str, int]:
    """The leader's wall clock (ns since the epoch), for a follower timing the round trip to it. Open: the time is no
    secret, and a token lookup in PerfDB would add its own time to the round trip, and so to the offset's uncertainty."""
    return {"now_ns": time.time_ns()}


async def _sharded(db: Db, principal: Principal, job_id: str, shard: int, attempt: int, follower_id: str) -> JobView:
    """Sharded job `job_id`, once this follower is shown to hold the running attempt of its shard `shard` (403/409)."""
    check_follower(principal, follower_id)
    parent = await jobs_store.get_job(db, job_id=job_id)
    if not 0 <= shard < len(parent.parts) or parent.spec.target is None or parent.spec.target.shards.n < 2:
        raise InvalidSpec(f"job {job_id} has no shard {shard}", field="shard")
    await jobs_store.running_attempt(db, job_id=parent.parts[shard], attempt=attempt, follower_id=follower_id)
    return parent


@router.post("/jobs/{job_id}/shards/{shard}/points/{index}/ready")
async def ready(
    job_id: str,
    shard: int,
    index: int,
    db: Db,
    principal: FollowerPrincipal,
    attempt: Annotated[int, Query(ge=1)],
    follower_id: str,
) -> BarrierAnswer:
    """Shard `shard` is ready for point `index`: "waiting" until every shard is (or the wait ran out), then "go" with
    the common start (leader clock, ns), or "skip" for a shard that came after the start."""
    parent = await _sharded(db, principal, job_id, shard, attempt, follower_id)
    doc = await shard_points_store.arrive(
        db,
        job_id=job_id,
        index=index,
        shard=shard,
        count=len(parent.parts),
        attempt=attempt,
        follower_id=follower_id,
        now_ns=time.time_ns(),
    )
    if doc.get("start_at_ns") is None:
        arrived = {int(k) for k in doc.get("arrivals") or {}}
        return BarrierAnswer(state="waiting", waiting_for=sorted(set(range(doc["count"])) - arrived))
    roster = {k: ShardArrival.model_validate(v) for k, v in (doc.get("roster") or {}).items()}
    mine = roster.get(str(shard))
    if mine is None or mine.attempt != attempt:
        return BarrierAnswer(state="skip", start_at_ns=doc["start_at_ns"])
    return BarrierAnswer(state="go", start_at_ns=doc["start_at_ns"], roster=roster)


@router.post("/jobs/{job_id}/shards/{shard}/points/{index}/records", status_code=204)
async def put_records(
    job_id: str,
    shard: int,
    index: int,
    request: Request,
    db: Db,
    principal: FollowerPrincipal,
    attempt: Annotated[int, Query(ge=1)],
    follower_id: str,
    meta: str,
) -> Response:
    """A shard's raw records of a point, with its run's figures (`meta`: a ShardFigures as JSON), for the coordinator
    to merge."""
    await _sharded(db, principal, job_id, shard, attempt, follower_id)
    try:
        figures = ShardFigures.model_validate_json(meta)
    except ValidationError as exc:
        fields, why = ", ".join(ShardFigures.model_fields), exc.errors()[0]["msg"]
        raise InvalidSpec(f"meta must be a JSON object of numbers under {fields} ({why})", field="meta") from None
    data = await read_limited(request, MAX_SHARD_RECORDS_BYTES)
    check_records_blob(data)
    await shard_points_store.put_records(
        db,
        job_id=job_id,
        index=index,
        shard=shard,
        attempt=attempt,
        follower_id=follower_id,
        blob=data,
        meta=figures.model_dump(),
    )
    return Response(status_code=204)


@router.get("/jobs/{job_id}/shards/points/{index}")
async def point_status(
    job_id: str, index: int, db: Db, principal: FollowerPrincipal, attempt: Annotated[int, Query(ge=1)], follower_id: str
) -> PointShards:
    """For the coordinator: each shard of the point's start as "uploaded" (with its figures), "waiting", or "lost"
    (its attempt ended or moved on without its records: the reason says why), and the shards absent at the start."""
    parent = await _sharded(db, principal, job_id, 0, attempt, follower_id)
    doc = await shard_points_store.point_doc(db, job_id=job_id, index=index)
    if doc is None or doc.get("start_at_ns") is None:
        raise InvalidSpec(f"point {index} has not started", field="index")
    stored = await shard_points_store.uploaded(db, job_id=job_id, index=index)
    out: list[ShardState] = []
    for shard in range(len(parent.parts)):
        entry = (doc.get("roster") or {}).get(str(shard))
        if entry is None:
            out.append(ShardState(shard=shard, state="absent", reason=f"shard {shard} was not ready when the point started"))
            continue
        arrival = ShardArrival.model_validate(entry)
        base: dict[str, Any] = {"shard": shard, "follower_id": arrival.follower_id, "attempt": arrival.attempt}
        record = stored.get(shard)
        if record is not None and record["attempt"] == arrival.attempt:
            figures = ShardFigures.model_validate(record.get("meta") or {})
            out.append(ShardState(**base, state="uploaded", figures=figures))
            continue
        part = await jobs_store.get_job(db, job_id=parent.parts[shard])
        if part.attempt != arrival.attempt or part.state not in (JobState.assigned, JobState.running):
            last = part.history[-1].reason if part.history else None
            why = f"its attempt {arrival.attempt} on follower {arrival.follower_id} ended without its records"
            out.append(ShardState(**base, state="lost", reason=f"{why} ({part.state.value}: {last or 'no reason given'})"))
        else:
            out.append(ShardState(**base, state="waiting"))
    return PointShards(start_at_ns=doc["start_at_ns"], shards=out)


@router.get("/jobs/{job_id}/shards/{shard}/points/{index}/records")
async def get_records(
    job_id: str,
    shard: int,
    index: int,
    db: Db,
    principal: Reader,
    attempt: Annotated[int | None, Query(ge=1)] = None,
    follower_id: str | None = None,
) -> Response:
    """A shard's own records of a point (npz, on its own clock): for the coordinator to merge, and for anyone who may
    read the job to check the merge (the merged point's percentiles are those of these records concatenated)."""
    if principal.role == "follower":
        await _sharded(db, principal, job_id, 0, attempt or 0, follower_id or "")
    else:
        await jobs_store.get_job(db, job_id=job_id, team=principal.scope)
    data = await shard_points_store.get_records(db, job_id=job_id, index=index, shard=shard)
    return Response(
        content=data,
        media_type="application/octet-stream",
        headers={"Content-Disposition": f'attachment; filename="{job_id}-{index}-shard{shard}.npz"'},
    )
