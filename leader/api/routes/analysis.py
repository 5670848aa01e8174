"""Analysis routes: leaderboard, recommender, comparisons (job vs job or pinned baseline), outliers, exports."""

from __future__ import annotations

from typing import Annotated, Any

import numpy as np
from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse, Response
from pydantic import BaseModel

from common.analysis import CompareResponse, LeaderboardPage, OutlierResponse, RecommendResponse
from common.errors import NotFound
from leader.analysis import compare as compare_mod
from leader.analysis import export, heatmap, records
from leader.analysis.leaderboard import LeaderboardIndex, to_row
from leader.analysis.recommend import recommend as recommend_rows
from leader.api import deps
from leader.api.deps import Db
from leader.store import jobs as jobs_store
from leader.store import leaderboard as store

# Reads need any logged-in user: the viewer role where the role-based auth exists, else the admin token.
ReadAuth = getattr(deps, "ViewerAuth", None) or deps.AdminAuth
WriteAuth = getattr(deps, "SubmitterAuth", None) or deps.AdminAuth

router = APIRouter(tags=["analysis"])


def get_index(request: Request) -> LeaderboardIndex:
    """The app's leaderboard index (made on first use; it lives as long as the app)."""
    index = getattr(request.app.state, "leaderboard_index", None)
    if index is None:
        index = request.app.state.leaderboard_index = LeaderboardIndex()
    return index


async def synced_index(request: Request, db: Any) -> LeaderboardIndex:
    """The index, caught up with PerfDB."""
    index = get_index(request)
    await index.sync(db)
    return index


@router.get("/leaderboard", response_model=LeaderboardPage, dependencies=[ReadAuth])
async def leaderboard(
    request: Request,
    db: Db,
    sort: str = "p99_ms",
    order: str = "asc",
    filter: Annotated[list[str] | None, Query()] = None,  # noqa: A002 - the API's parameter name
    limit: int = 50,
    offset: int = 0,
) -> LeaderboardPage:
    """Every point as a row, sorted and filtered server-side (`filter=backend:triton`, `filter=p99<20`)."""
    index = await synced_index(request, db)
    return index.query(sort=sort, order=order, filters=filter or [], limit=limit, offset=offset)


@router.get("/heatmap", response_model=heatmap.HeatMap, dependencies=[ReadAuth])
async def heat_map(
    request: Request,
    db: Db,
    metric: str = "p99_ms",
    x: str = "batch_size",
    y: str = "rate",
    filter: Annotated[list[str] | None, Query()] = None,  # noqa: A002 - the API's parameter name
) -> heatmap.HeatMap:
    """The analysis page's heat map as data: mean `metric` of valid points over two axes (depth/width/kind too)."""
    heatmap.check_args(metric, x, y)
    index = await synced_index(request, db)
    return heatmap.heat_map(index.select(filter or []), metric=metric, x=x, y=y)


@router.get("/recommend", response_model=RecommendResponse, dependencies=[ReadAuth])
async def recommend(
    request: Request,
    db: Db,
    p99_ms: Annotated[float, Query(gt=0)],
    min_throughput: Annotated[float | None, Query(ge=0)] = None,
    max_cost: Annotated[float | None, Query(ge=0)] = None,
    model: str | None = None,
    filter: Annotated[list[str] | None, Query()] = None,  # noqa: A002
    confident: bool = False,
) -> RecommendResponse:
    """The top-3 configurations meeting the SLO, each with the point that backs it.

    `confident=true` holds the SLO against the upper end of each point's p99 95% CI instead of the estimate.
    """
    index = await synced_index(request, db)
    return recommend_rows(
        index.select(filter or []), p99_ms=p99_ms, min_throughput=min_throughput, max_cost=max_cost, model=model,
        confident=confident,
    )  # fmt: skip


async def _job_rows(db: Any, job_ref: str, field: str) -> list[dict[str, Any]]:
    """The rows of a job id, or of the job pinned as baseline `baseline:NAME`."""
    job_id = job_ref
    if job_ref.startswith("baseline:"):
        pinned = await store.get_baseline(db, name=job_ref.removeprefix("baseline:"))
        if pinned is None:
            raise NotFound(f"no baseline named {job_ref.removeprefix('baseline:')!r}", field=field)
        job_id = pinned
    rows = await store.job_rows(db, job_id=job_id)
    if not rows:
        raise NotFound(f"job {job_id} has no results", field=field)
    return rows


def _latency_loader(db: Any) -> compare_mod.LatencyLoader:
    async def load(row: dict[str, Any]) -> tuple[np.ndarray, np.ndarray] | None:
        blob = await records.load_records(db, job_id=row["job_id"], attempt=row["attempt"], index=row["index"])
        return records.timed_latencies_ms(records.decode(blob)) if blob else None

    return load


@router.get("/compare", response_model=CompareResponse, dependencies=[ReadAuth])
async def compare(
    db: Db, a: str, b: str, threshold: Annotated[float, Query(gt=0, lt=10)] = compare_mod.DEFAULT_THRESHOLD
) -> CompareResponse:
    """Job b against job a (or `baseline:NAME`) point by point; raw latencies get a bootstrap CI and Mann-Whitney."""
    a_rows, b_rows = await _job_rows(db, a, "a"), await _job_rows(db, b, "b")
    return await compare_mod.compare_rows(a_rows, b_rows, a=a, b=b, load_latencies=_latency_loader(db), threshold=threshold)


class BaselineBody(BaseModel):
    """Which job to pin."""

    job_id: str


@router.put("/baselines/{name}", dependencies=[WriteAuth])
async def pin_baseline(name: str, body: BaselineBody, db: Db) -> dict[str, str]:
    """Pin a job as the named baseline (compare with `a=baseline:NAME`)."""
    await jobs_store.get_job(db, job_id=body.job_id)  # 404 for an unknown job
    await store.set_baseline(db, name=name, job_id=body.job_id)
    return {"name": name, "job_id": body.job_id}


@router.get("/outliers", response_model=OutlierResponse, dependencies=[ReadAuth])
async def outliers(
    request: Request, db: Db, name: str, threshold: Annotated[float, Query(gt=0, lt=10)] = compare_mod.OUTLIER_THRESHOLD
) -> OutlierResponse:
    """Jobs named `name` run on several followers: flag the follower whose p99 stands out from the class median."""
    index = await synced_index(request, db)
    rows = index.select([f"job_name:{name}"])
    if not rows:
        raise NotFound(f"no results of jobs named {name!r}", field="name")
    return compare_mod.follower_outliers(rows, name=name, threshold=threshold)


@router.get("/jobs/{job_id}/export", dependencies=[ReadAuth])
async def export_job(job_id: str, db: Db, format: str = "csv") -> Response:  # noqa: A002
    """The job's points as CSV, JSON or Parquet (one flat row per point)."""
    fmt = export.check_format(format)
    await jobs_store.get_job(db, job_id=job_id)
    rows = [to_row(doc).model_dump() for doc in await store.job_rows(db, job_id=job_id)]
    return Response(
        export.table_bytes(rows, fmt),
        media_type=export.MEDIA[fmt],
        headers={"Content-Disposition": f'attachment; filename="{job_id}.{fmt}"'},
    )


@router.get("/jobs/{job_id}/points/{index}/records/export", dependencies=[ReadAuth])
async def export_records(job_id: str, index: int, db: Db, format: str = "parquet", attempt: int | None = None) -> Response:  # noqa: A002
    """One point's raw per-request records (intended/sent/first-byte/done ns, status) as CSV, JSON or Parquet."""
    fmt = export.check_format(format)
    job = await jobs_store.get_job(db, job_id=job_id)
    blob = await records.load_records(db, job_id=job_id, attempt=attempt or job.attempt, index=index)
    if blob is None:
        raise NotFound(f"no raw records for point {index} of job {job_id}", field="index")
    return Response(
        export.records_bytes(records.decode(blob), fmt),
        media_type=export.MEDIA[fmt],
        headers={"Content-Disposition": f'attachment; filename="{job_id}-{index}-records.{fmt}"'},
    )


@router.get("/jobs/{job_id}/report.html", response_class=HTMLResponse, dependencies=[ReadAuth])
async def job_report(job_id: str, db: Db) -> HTMLResponse:
    """A self-contained HTML report of the job (inline CSS and SVG; opens offline)."""
    from leader.web.pages import render_report  # the web package renders; routes stay thin

    html = await render_report(db, job_id=job_id)
    return HTMLResponse(html, headers={"Content-Disposition": f'attachment; filename="{job_id}-report.html"'})
