"""What the API and the pages both read: a job's (or baseline's) rows, raw latencies and models' compute cost.
Analysis computes data; `leader/api` returns it as JSON and `leader/web` draws it."""

from __future__ import annotations

from typing import Any

import numpy as np

from common.errors import BenchfleetError, NotFound
from common.wire.analysis import CompareResponse
from common.wire.auth import DEFAULT_TEAM
from common.wire.results import PointResult
from leader.analysis import compare, flops, records
from leader.store import jobs as jobs_store
from leader.store import leaderboard as leaderboard_store
from leader.store import lookup
from leader.store import models as models_store
from leader.store import results as results_store


async def job_rows(db: Any, job_ref: str, field: str, team: str | None = None) -> list[dict[str, Any]]:
    """The rows of a job id, or of the job pinned as baseline `baseline:NAME` (the caller's team's; an admin's
    `baseline:TEAM/NAME` names another team's), seen from `team` (None: every team); NotFound naming `field`."""
    job_id = job_ref
    if job_ref.startswith("baseline:"):
        ref = job_ref.removeprefix("baseline:")
        owner_team, _, name = ref.rpartition("/")
        owner_team = owner_team or team or DEFAULT_TEAM
        pinned = None
        if team is None or owner_team == team:
            pinned = await leaderboard_store.get_baseline(db, team=owner_team, name=name)
        if pinned is None:
            raise NotFound(f"no baseline named {ref!r}", field=field)
        job_id = pinned
    else:  # a job id, or a unique start of it (what the console and the CLI show)
        job_id = await lookup.resolve_prefix(db, jobs_store.COLLECTION, job_ref, what="job", field=field, team=team)
    rows = await leaderboard_store.job_rows(db, job_id=job_id, team=team)
    if not rows:
        raise NotFound(f"job {job_id} has no results", field=field)
    return rows


def latency_loader(db: Any) -> compare.LatencyLoader:
    """Loads a row's measured latencies (and a language model's series) for comparisons, None where its records were
    not kept."""

    async def load(row: dict[str, Any]) -> compare.Measured | None:
        where = {"job_id": row["job_id"], "attempt": row["attempt"], "index": row["index"]}
        blob = await records.load_records(db, **where)
        result = await results_store.get_point(db, **where) if blob else None
        if not blob or not result:
            return None
        arrays = records.decode(blob)
        return compare.Measured(records.measured_latencies_ms(arrays, result), records.measured_llm(arrays, result))

    return load


async def compare_jobs(
    db: Any,
    a: str,
    b: str,
    threshold: float,
    team: str | None = None,
    quality_threshold: float = compare.DEFAULT_QUALITY_THRESHOLD,
    include_imported: bool = False,
) -> CompareResponse:
    """Job (or baseline) b against a, point by point, as `team` sees them (None: every team); `include_imported`: a
    point another tool measured is judged too (by its recomputed figures where it has them)."""
    a_rows, b_rows = await job_rows(db, a, "a", team), await job_rows(db, b, "b", team)
    return await compare.compare_rows(
        a_rows,
        b_rows,
        a=a,
        b=b,
        load_latencies=latency_loader(db),
        threshold=threshold,
        quality_threshold=quality_threshold,
        include_imported=include_imported,
    )


async def raw_latencies(db: Any, job_id: str, attempt: int, points: list[PointResult]) -> dict[int, np.ndarray]:
    """Each point's measured latencies (ms from the intended time) by point index, where its records were kept."""
    out = {}
    for p in points:
        blob = await records.load_records(db, job_id=job_id, attempt=attempt, index=p.point.index)
        if blob:
            out[p.point.index] = records.measured_latencies_ms(records.decode(blob), p)[1]
    return out


async def raw_llm(db: Any, job_id: str, attempt: int, points: list[PointResult]) -> dict[int, records.LlmSeries]:
    """Each language-model point's token series by point index, where its records were kept."""
    out = {}
    for p in points:
        if p.llm is None:
            continue
        blob = await records.load_records(db, job_id=job_id, attempt=attempt, index=p.point.index)
        series = records.measured_llm(records.decode(blob), p) if blob else None
        if series is not None:
            out[p.point.index] = series
    return out


async def model_cost(db: Any, ref: str) -> flops.ModelCost | None:
    """A canonical model's analytic FLOPs/bytes per inference (exact), else the estimate from its ONNX weights."""
    name, _, version = ref.partition(":")
    try:
        meta = await models_store.get_model(db, name=name, version=version or None)
        canon = meta.canonical
        if canon is not None and canon.flops and canon.bytes:
            return flops.ModelCost(flops_per_sample=float(canon.flops), weight_bytes=float(canon.bytes))
        if meta.format != "onnx":
            return None
        _, chunks = await models_store.open_model_file(db, name=name, version=version or "latest")
        data = b"".join([chunk async for chunk in chunks])
    except BenchfleetError:
        return None
    return flops.model_cost(data)
