"""One point, measured: plan → drive → judge → result; a search point runs its probes this way (follower/point/search.py)."""

from __future__ import annotations

import logging
from datetime import UTC, datetime

from common.spec.job import PointSpec
from common.wire.results import ColdStart, PointResult
from follower.point.context import PointContext
from follower.point.drive import drive_point
from follower.point.judge import judge
from follower.point.llmquality import with_llm_quality
from follower.point.plan import plan_point
from follower.point.postprocess import with_client_postprocess
from follower.point.quality import with_quality
from follower.point.result import point_result
from follower.point.search import run_search
from follower.point.shard import drive_shard

log = logging.getLogger(__name__)


async def measure_point(point: PointSpec, ctx: PointContext, cold_start: ColdStart | None = None) -> PointResult:
    """Measure one point (or search its highest SLO-meeting load); a dead server gives an invalid result, not an exception."""
    if point.search is None:
        result = await _measure(point, ctx, cold_start)
    else:
        result = await run_search(point, ctx, cold_start, _measure)
    scored = with_quality if point.llm is None else with_llm_quality
    return await scored(await with_client_postprocess(result, point, ctx), point, ctx)


async def _measure(point: PointSpec, ctx: PointContext, cold_start: ColdStart | None) -> PointResult:
    """Warm-up then measure one point against the running server."""
    started_at = datetime.now(UTC)
    plan = plan_point(point, ctx)
    if ctx.run.shard is not None:  # this follower's share, from the common start; shard 0 merges all (point/shard.py)
        driven, plan = await drive_shard(plan, ctx)
    else:
        driven = await drive_point(plan, ctx)
    judged = judge(plan, driven, ctx)
    if ctx.run.records_sink is not None:
        ctx.run.records_sink(plan.point, driven.records, judged.summary)
    summary = judged.summary
    log.info(
        "point %d: %d req, %d ok, lag p99 %s ms, generator cpu %.0f%%, loop lag p99 %s ms, %s",
        plan.point.index,
        summary.requests,
        summary.ok,
        summary.send_lag_ms and round(summary.send_lag_ms.p99, 3),
        100 * summary.cpu_share,
        summary.loop_lag_ms and round(summary.loop_lag_ms.p99, 3),
        [r.text for r in judged.reasons] or "valid",
    )
    return point_result(plan, driven, judged, ctx, started_at=started_at, cold_start=cold_start)
