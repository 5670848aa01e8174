"""One point, measured: plan → drive → judge → result; and the search for the highest rate that meets the SLO."""

from __future__ import annotations

import logging
from datetime import UTC, datetime

from common.spec.job import PointSpec
from common.wire.results import ColdStart, PointResult, Reason, SearchStep
from follower.point.context import PointContext
from follower.point.drive import drive_point
from follower.point.judge import judge
from follower.point.plan import plan_point
from follower.point.result import point_result
from follower.point.shard import drive_shard

log = logging.getLogger(__name__)


async def measure_point(point: PointSpec, ctx: PointContext, cold_start: ColdStart | None = None) -> PointResult:
    """Measure one point (or search its highest SLO-meeting rate); a dead server gives an invalid result, not an exception."""
    if point.search is None:
        return await _measure(point, ctx, cold_start)
    return await _search(point, ctx, cold_start)


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


async def _search(point: PointSpec, ctx: PointContext, cold_start: ColdStart | None) -> PointResult:
    """Binary search for the highest rate whose run is valid and meets the SLO; the result is that run's.

    Each probe is a full measured run (warm-up included) with its own seed; a probe that is invalid counts as a
    failure (a rate the generator or server could not be measured at cannot be claimed). When no rate passes, the
    lowest probe's result is returned, marked with the reason.
    """
    search = point.search
    assert search is not None
    low, high = search.low, search.high
    steps: list[SearchStep] = []
    best: PointResult | None = None
    lowest: PointResult | None = None
    rate = high
    for step in range(search.max_steps):
        probe = point.model_copy(update={"rate": rate, "search": None, "seed": (point.seed + 7919 * step) % 2**32})
        result = await _measure(probe, ctx, cold_start)
        passed = result.valid and result.slo_met is True
        steps.append(
            SearchStep(
                rate=rate,
                valid=result.valid,
                slo_met=result.slo_met,
                achieved_rate=result.achieved_rate,
                p99_ms=result.latency_ms.p99 if result.latency_ms else None,
            )
        )
        if lowest is None or rate < lowest.point.rate:
            lowest = result
        if passed:
            low = rate
            if best is None or rate > best.point.rate:
                best = result
        else:
            high = rate
        # Probe order: the upper bound (passing ends the search), the lower bound (failing ends it), then bisect.
        if step == 0:
            if passed:
                break
            rate = search.low
            continue
        if step == 1 and not passed:
            break
        if (high - low) / high < search.precision:
            break
        rate = (low + high) / 2
    chosen = best or lowest
    assert chosen is not None
    reasons = list(chosen.reasons)
    if best is None:
        failed = f"no rate in [{search.low:g}, {search.high:g}] req/s was valid and met the SLO"
        reasons.append(Reason(code="search_failed", text=failed))
    return chosen.model_copy(update={"point": point, "search": steps, "reasons": reasons, "valid": not reasons})
