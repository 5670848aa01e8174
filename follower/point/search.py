"""A search point, run: every probe a full measured point (warm-up, validity gates, its own seed and raw records),
read against the job's SLO; the plan (follower/point/searchplan.py) chooses the next load. The point's result is the
chosen probe's run (the highest passing load's), its load the one found, with the answer: the interval, why it
stopped and every probe's figures."""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable

from common.spec.job import PointSpec
from common.spec.slo import SLO
from common.stats import merge, summarize, wilson_interval
from common.wire.results import ColdStart, PointResult, Reason
from common.wire.search import SearchAnswer, SearchProbe
from follower.loadgen.records import LoadRecords
from follower.loadgen.verdict import WindowSummary
from follower.point.context import PointContext
from follower.point.drive import REQUEST_TIMEOUT_S
from follower.point.idle import Drain, Gauge, IdleGauge, probe
from follower.point.searchplan import Reading, SearchPlan

Measure = Callable[[PointSpec, PointContext, ColdStart | None], Awaitable[PointResult]]
# How long a probe waits at most for the server to work off the previous probe's backlog; past it, the probe is
# measured anyway and invalid (backlog), so the search repeats or fails it rather than read the backlog as its own.
DRAIN_LIMIT_S = 120.0


def criterion(slo: SLO, llm: bool) -> str:
    """The search's criterion in words."""
    parts = [f"{name} <= {limit:g} ms" for name, limit in (("p50", slo.p50_ms), ("p99", slo.p99_ms)) if limit is not None]
    if llm and slo.per_request:
        limits = ", ".join(
            f"{name} <= {limit:g} ms"
            for name, limit in (("ttft", slo.ttft_ms), ("tpot", slo.tpot_ms), ("e2e", slo.e2e_ms))
            if limit is not None
        )
        parts.append(f"attainment >= {slo.attainment:g} of {limits}")
    return " and ".join(parts)


def read(runs: list[PointResult], slo: SLO) -> Reading:
    """The verdict of the runs at one load (one run, or an uncertain one and its repeat, pooled) against the SLO.

    Each limit gives a margin, the share of its room left: 1 - p99/limit for a latency percentile, 1 - misses/allowed
    misses for the attainment; the reading's margin is the smallest. One run is uncertain when a limit lies inside its
    95% interval (the p99's block bootstrap, the attainment's Wilson interval); pooled runs are read from their merged
    histograms and summed counts, and stay uncertain when the runs disagree.
    """
    valid = all(r.valid for r in runs)
    margins: list[float] = []
    intervals: list[tuple[float, float] | None] = []
    uncertain = False
    for name, limit in (("p50", slo.p50_ms), ("p99", slo.p99_ms)):
        if limit is None:
            continue
        value = _percentile(runs, name)
        if value is None:
            return Reading(valid=False, margin=None)
        margins.append(1 - value / limit)
        ci = (runs[0].latency_ci_ms or {}).get(name) if len(runs) == 1 else None
        intervals.append(None if ci is None else (1 - ci[1] / limit, 1 - ci[0] / limit))
        if ci is not None:
            uncertain |= ci[0] < limit < ci[1]
        elif len(runs) > 1:
            uncertain |= len({getattr(r.latency_ms, name) <= limit for r in runs if r.latency_ms is not None}) > 1
    figures = [r.llm for r in runs if r.llm is not None and r.llm.goodput_of is not None]
    if slo.per_request and figures:
        good = sum(f.goodput_requests or 0 for f in figures)
        of = sum(f.goodput_of or 0 for f in figures)
        allowed = max(1 - slo.attainment, 1e-9)
        margins.append(1 - (1 - (good / of if of else 0.0)) / allowed)
        wilson = wilson_interval(good, of)
        intervals.append(None if wilson is None else (1 - (1 - wilson[0]) / allowed, 1 - (1 - wilson[1]) / allowed))
        uncertain |= wilson is not None and wilson[0] < slo.attainment < wilson[1]
    if not margins:
        return Reading(valid=False, margin=None)
    # The smallest margin decides; its interval is the lowest of the ends (where every limit has one).
    known = [i for i in intervals if i is not None]
    interval = (min(i[0] for i in known), min(i[1] for i in known)) if known and len(known) == len(intervals) else None
    return Reading(valid=valid, margin=min(margins), uncertain=uncertain, interval=interval)


def _percentile(runs: list[PointResult], name: str) -> float | None:
    if any(r.latency_ms is None for r in runs):
        return None
    if len(runs) == 1:
        return float(getattr(runs[0].latency_ms, name))
    if any(r.latency_hdr is None for r in runs):  # no histogram to pool: the worse run decides
        return max(float(getattr(r.latency_ms, name)) for r in runs)
    pooled = summarize(merge([r.latency_hdr for r in runs if r.latency_hdr is not None]))
    return None if pooled is None else float(getattr(pooled, name))


def _probe(load: float, run: PointResult, reading: Reading, *, repeat: bool, drain: Drain | None) -> SearchProbe:
    llm = run.llm
    return SearchProbe(
        drain_s=None if drain is None else round(drain.waited_s, 3),
        drained=drain is None or drain.drained,
        load=load,
        seed=run.environment.seed,
        valid=run.valid,
        passed=reading.passed,
        margin=reading.margin,
        achieved_rate=run.achieved_rate,
        p99_ms=run.latency_ms.p99 if run.latency_ms else None,
        p99_ci_ms=(run.latency_ci_ms or {}).get("p99"),
        attainment=llm.goodput_share if llm else None,
        attainment_ci=llm.goodput_ci if llm else None,
        uncertain=reading.uncertain,
        repeat=repeat,
        pooled=repeat,
        reasons=run.invalid_reasons,
    )


async def run_search(
    point: PointSpec, ctx: PointContext, cold_start: ColdStart | None, measure: Measure, gauge: Gauge | None = None
) -> PointResult:
    """Search the point's highest passing load; every probe's records go to the run's sink as probe k, the chosen
    probe's also as the point's own. Each probe after the first waits until the server has worked off the previous
    one's backlog (`gauge`: one request at a time against the server, follower/point/idle.py)."""
    search, slo = point.search, ctx.run.slo
    assert search is not None and slo is not None, "a search needs an SLO (checked at submission)"
    if gauge is None:
        asked, body = probe(ctx.run.model, ctx.prompts, ctx.endpoint, point.batch_size, ctx.run.samples, point.llm)
        gauge = IdleGauge(asked, body, REQUEST_TIMEOUT_S, ctx.run.credentials)
    await gauge.reference()  # before the first probe, on a server nothing has loaded yet
    plan = SearchPlan(search)
    users = search.over == "concurrency"
    kept: list[tuple[LoadRecords, WindowSummary] | None] = []

    def keep(point: PointSpec, records: LoadRecords, summary: WindowSummary, probe: int | None = None) -> None:
        kept[-1] = (records, summary)

    probe_ctx = dataclasses.replace(ctx, run=dataclasses.replace(ctx.run, records_sink=keep))
    probes: list[SearchProbe] = []
    runs: list[tuple[float, PointResult]] = []
    while (step := plan.next_load()) is not None:
        load, repeat = step
        seed = (point.seed + 7919 * len(runs)) % 2**32
        at = {"concurrency": int(load)} if users else {"rate": load, "duration_s": search.probe_duration(load, point.duration_s)}
        kept.append(None)
        drain = await gauge.wait_drained(DRAIN_LIMIT_S) if runs else None
        result = await measure(point.model_copy(update={**at, "search": None, "seed": seed}), probe_ctx, cold_start)
        if drain is not None and not drain.drained:  # measured against the previous probe's backlog: says nothing
            backlog = Reason(code="backlog", text=drain.describe())
            result = result.model_copy(update={"reasons": [*result.reasons, backlog], "valid": False})
        same = [r for x, r in runs if x == load] + [result]
        # A repeat is decided by the load's valid runs (an invalid one says nothing of the SLO); by all, if none is.
        read_runs = ([r for r in same if r.valid] or same) if repeat else [result]
        # A run on the previous probe's backlog says nothing of the SLO at its load, however far it missed: repeated.
        backlogged = drain is not None and not drain.drained and not repeat
        reading = Reading(valid=False, margin=None) if backlogged else read(read_runs, slo)
        plan.record(load, reading)
        runs.append((load, result))
        probes.append(_probe(load, result, reading, repeat=repeat, drain=drain))
        if repeat:  # each run at this load is decided by the reading it was part of; one left out (invalid) fails
            pooled = len(read_runs) > 1
            for i, (run_load, run) in enumerate(runs):
                if run_load == load:
                    used = any(r is run for r in read_runs)
                    probes[i] = probes[i].model_copy(update={"passed": reading.passed and used, "pooled": pooled and used})
    outcome = plan.outcome()
    target = outcome.found if outcome.found is not None else search.low
    # The point's run at the load found: its last valid one (a repeat decided by its valid run alone), else its last.
    at_target = [i for i, (x, _) in enumerate(runs) if x == target]
    chosen = max([i for i in at_target if runs[i][1].valid] or at_target)
    answer = SearchAnswer(
        over=search.over,
        criterion=criterion(slo, point.llm is not None),
        found=outcome.found,
        lowest_fail=outcome.lowest_fail,
        precision=search.precision,
        width=outcome.width,
        limit_low=outcome.limit_low,
        limit_high=outcome.limit_high,
        stopped=outcome.stopped,
        cliff=outcome.cliff,
        monotone=outcome.monotone,
        notes=outcome.notes,
        chosen=chosen,
        probes=probes,
    )
    result = runs[chosen][1]
    found_point = point.model_copy(update={"concurrency": int(target)} if users else {"rate": target})
    sink = ctx.run.records_sink
    if sink is not None:
        for k, records in enumerate(kept):
            if records is not None:
                sink(found_point, *records, probe=k)
        if (records := kept[chosen]) is not None:
            sink(found_point, *records)
    reasons = list(result.reasons)
    if outcome.found is None:
        unit = "users" if users else "req/s"
        failed = f"no load in [{search.low:g}, {search.high:g}] {unit} was valid and met the SLO ({answer.criterion})"
        reasons.append(Reason(code="search_failed", text=failed))
    return result.model_copy(update={"point": found_point, "search": answer, "reasons": reasons, "valid": not reasons})
