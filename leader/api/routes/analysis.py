"""Analysis routes: leaderboard, recommender, comparisons (job vs job or pinned baseline), outliers, exports."""

from __future__ import annotations

import json
from typing import Annotated, Literal

from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import Response, StreamingResponse
from pydantic import BaseModel

from common.base import NAME_PATTERN
from common.errors import Forbidden, NotFound
from common.wire.analysis import CompareResponse, LeaderboardPage, OutlierResponse, RecommendResponse
from leader.analysis import anomalies, export, heatmap, queries, records, reports
from leader.analysis import compare as compare_mod
from leader.analysis import leaderboard as board
from leader.analysis.leaderboard import to_row
from leader.analysis.recommend import parse_query
from leader.analysis.recommend import recommend as recommend_rows
from leader.api import heavy
from leader.api.deps import Db, JobId, Submitter, Viewer
from leader.store import jobs as jobs_store
from leader.store import leaderboard as store
from leader.store import lookup
from leader.store import results as results_store
from leader.store.records import MAX_PROBE

router = APIRouter(tags=["analysis"])


@router.get("/leaderboard", response_model=LeaderboardPage)
async def leaderboard(
    request: Request,
    db: Db,
    viewer: Viewer,
    sort: str = "p99_ms",
    order: str = "asc",
    filter: Annotated[list[str] | None, Query()] = None,  # noqa: A002 - the API's parameter name
    limit: int = 50,
    offset: int = 0,
) -> LeaderboardPage:
    """Every point of the caller's team (every team's for an admin) as a row, sorted and filtered server-side
    (`filter=backend:triton`, `filter=p99<20`, `filter=team:x`)."""
    return await board.page(db, sort=sort, order=order, filters=filter or [], limit=limit, offset=offset, team=viewer.scope)


@router.get("/heatmap", response_model=heatmap.HeatMap)
async def heat_map(
    request: Request,
    db: Db,
    viewer: Viewer,
    metric: str = "p99_ms",
    x: str = "batch_size",
    y: str = "rate",
    filter: Annotated[list[str] | None, Query()] = None,  # noqa: A002 - the API's parameter name
) -> heatmap.HeatMap:
    """The analysis page's heat map as data: mean `metric` of valid points over two axes (depth/width/kind too)."""
    heatmap.check_args(metric, x, y)
    rows = await board.select(db, filter or [], team=viewer.scope, columns=("valid", metric, x, y))
    return heatmap.heat_map(rows, metric=metric, x=x, y=y)


@router.get("/recommend", response_model=RecommendResponse)
async def recommend(
    request: Request,
    db: Db,
    viewer: Viewer,
    p99_ms: float | None = None,
    ttft_ms: float | None = None,
    tpot_ms: float | None = None,
    min_throughput: float | None = None,
    min_samples_per_s: float | None = None,
    min_tokens_per_s: float | None = None,
    max_cost: float | None = None,
    max_cost_per_1m_tokens: float | None = None,
    model: str | None = None,
    min_accuracy: float | None = None,
    max_accuracy_drop: float | None = None,
    filter: Annotated[list[str] | None, Query()] = None,  # noqa: A002
    confident: bool = False,
) -> RecommendResponse:
    """The top-3 configurations meeting the query (common.wire.analysis.RecommendQuery), the most work served first
    (output tokens/s for a language model's TTFT/TPOT question, else samples/s), each with the point that backs it;
    with none, `missing` says which constraint no point met and what to run.

    `min_throughput` is in requests/s; `max_cost` per 1M requests, `max_cost_per_1m_tokens` per 1M output tokens.
    `min_accuracy` (0..1) is the least top-1 accuracy a point's answers must have scored (a job's `quality:`; a point
    never scored fails it); `max_accuracy_drop` (0..1) keeps only points within that much of the most accurate score
    any point of the same model reached. `confident=true` holds the p99 and TTFT limits against the upper end of each point's 95%
    CI, and the accuracy floor against the lower end of its interval.
    """
    query = parse_query(
        {
            "p99_ms": p99_ms,
            "ttft_ms": ttft_ms,
            "tpot_ms": tpot_ms,
            "min_throughput": min_throughput,
            "min_samples_per_s": min_samples_per_s,
            "min_tokens_per_s": min_tokens_per_s,
            "max_cost": max_cost,
            "max_cost_per_1m_tokens": max_cost_per_1m_tokens,
            "model": model,
            "min_accuracy": min_accuracy,
            "max_accuracy_drop": max_accuracy_drop,
            "confident": confident,
        }
    )
    return recommend_rows(await board.select(db, filter or [], team=viewer.scope), query)


@router.get("/compare", response_model=CompareResponse)
async def compare(
    db: Db,
    viewer: Viewer,
    a: str,
    b: str,
    threshold: Annotated[float, Query(gt=0, lt=10)] = compare_mod.DEFAULT_THRESHOLD,
    quality_threshold: Annotated[float, Query(gt=0, lt=1)] = compare_mod.DEFAULT_QUALITY_THRESHOLD,
    include_imported: bool = False,
) -> CompareResponse:
    """Job b against job a (or `baseline:NAME`) point by point; raw latencies get a bootstrap CI and Mann-Whitney;
    top-1 accuracy (both jobs with `quality:`) its difference's interval, a fall beyond `quality_threshold` (share
    points: 0.005 is half a point) outside it a regression. A point another tool measured (an imported job) is keyed on
    pattern and load and judged only with `include_imported` (by benchfleet's definitions recomputed from its records
    where it has them; the comparison says which definitions differ)."""
    return await queries.compare_jobs(
        db, a, b, threshold, team=viewer.scope, quality_threshold=quality_threshold, include_imported=include_imported
    )


class BaselineBody(BaseModel):
    """Which job to pin."""

    job_id: str


@router.put("/baselines/{name}")
async def pin_baseline(
    name: Annotated[str, Path(pattern=NAME_PATTERN)], body: BaselineBody, db: Db, principal: Submitter
) -> dict[str, str]:
    """Pin a job as its team's named baseline (compare with `a=baseline:NAME`); a baseline someone else pinned is
    theirs to repoint (or an admin's): 403 otherwise."""
    job_id = await lookup.resolve_prefix(db, jobs_store.COLLECTION, body.job_id, what="job", field="job_id", team=principal.scope)
    job = await jobs_store.get_job(db, job_id=job_id, team=principal.scope, field="job_id")  # 404: unknown to us
    owner = await store.baseline_owner(db, team=job.team, name=name)
    if owner is not None and not principal.may_manage(owner):
        raise Forbidden(f"baseline {name} was pinned by {owner}; only they or an admin may repoint it", field="name")
    await store.set_baseline(db, team=job.team, name=name, job_id=job_id, owner=principal.user)
    return {"name": name, "job_id": job_id, "team": job.team}


@router.get("/outliers", response_model=OutlierResponse)
async def outliers(
    request: Request,
    db: Db,
    viewer: Viewer,
    name: str,
    threshold: Annotated[float, Query(gt=0, lt=10)] = anomalies.THRESHOLD,
    metric: Literal["p50_ms", "p99_ms"] = "p99_ms",
) -> OutlierResponse:
    """Jobs named `name` run on several followers: flag the follower whose figure stands out from its class (robust
    z-score over the median and MAD beyond 3.5, and slower than the median by more than `threshold`)."""
    rows = await board.select(db, [f"job_name:{name}"], team=viewer.scope)
    if not rows:
        raise NotFound(f"no results of jobs named {name!r}", field="name")
    return anomalies.across_followers(rows, name=name, metric=metric, threshold=threshold)


@router.get("/jobs/{job_id}/export")
async def export_job(
    job_id: JobId,
    db: Db,
    viewer: Viewer,
    format: str = "csv",  # noqa: A002
    point: Annotated[int | None, Query(ge=0)] = None,
) -> Response:
    """The job's points as CSV, JSON or Parquet (one flat row per point); or, `llm-d` and `mlperf`, as the reports those
    tools read (a JSON list, one per point; `point` picks one): llm-d's benchmark report v0.2, checked against its
    schema, and the summary MLPerf LoadGen's logs give, under its key names. Each says benchfleet's definitions."""
    if format in reports.REPORT_FORMATS:
        job = await jobs_store.get_job(db, job_id=job_id, team=viewer.scope)
        reports.check_job(job, format)
        points = [p for p in await results_store.job_points(db, job) if point is None or p.point.index == point]
        if point is not None and not points:
            raise NotFound(f"job {job_id} has no point {point}", field="point")
        write = reports.llmd_report if format == "llm-d" else reports.mlperf_summary
        body = [write(job, p) for p in points]
        name = f"{job_id}{'' if point is None else f'-{point}'}.{format}.json"
        return Response(
            json.dumps(body[0] if point is not None else body, indent=1).encode(),
            media_type="application/json",
            headers={"Content-Disposition": f'attachment; filename="{name}"'},
        )
    fmt = export.check_format(format)
    await jobs_store.get_job(db, job_id=job_id, team=viewer.scope)
    rows = [to_row(doc).model_dump() for doc in await store.job_rows(db, job_id=job_id)]
    return Response(
        await heavy.run("export", export.table_bytes, rows, fmt),
        media_type=export.MEDIA[fmt],
        headers={"Content-Disposition": f'attachment; filename="{job_id}.{fmt}"'},
    )


@router.get("/jobs/{job_id}/points/{index}/records/export")
async def export_records(
    job_id: JobId,
    index: int,
    db: Db,
    viewer: Viewer,
    format: str = "parquet",  # noqa: A002
    attempt: int | None = None,
    probe: Annotated[int | None, Query(ge=0, le=MAX_PROBE)] = None,
) -> Response:
    """One point's raw per-request records (intended/sent/first-byte/done ns, status) as CSV, JSON or Parquet; a
    search point's are its chosen probe's, `probe` picks another of its probes."""
    fmt = export.check_format(format)
    job = await jobs_store.get_job(db, job_id=job_id, team=viewer.scope)
    blob = await records.load_records(db, job_id=job_id, attempt=attempt or job.attempt, index=index, probe=probe)
    if blob is None:
        raise NotFound(f"no raw records for point {index} of job {job_id}", field="index")
    arrays = await heavy.run("export", records.decode, blob)
    # Encoded a chunk at a time as it is sent (each chunk in a worker thread: Starlette iterates a plain iterator there).
    return StreamingResponse(
        export.records_chunks(arrays, fmt),
        media_type=export.MEDIA[fmt],
        headers={"Content-Disposition": f'attachment; filename="{job_id}-{index}-records.{fmt}"'},
    )
