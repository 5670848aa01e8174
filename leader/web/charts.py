"""The pages' charts as data: each is a spec (a JSON-ready dict) that static/charts.js draws with uPlot (hover values,
drag to zoom, double-click to reset, click a legend entry to hide its series). Here only what to draw is decided.

Kinds: "line" (series of x/y pairs, optional log axes, invalid points marked), "bar" (stacked bars over categories)
and "heatmap" (a value per cell of two hyper-parameters). A chart with nothing to draw carries `empty`, the reason.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from common.spec.slo import SLO
from common.spec.sweep import label as sweep_label
from common.wire.results import PointResult
from common.wire.search import SearchProbe
from leader.analysis.heatmap import HeatMap
from leader.analysis.roofline import Roofline

Chart = dict[str, Any]
Series = tuple[str, Sequence[float | None], Sequence[float | None]]

CDF_QUANTILES = 200  # points per CDF curve: enough for a smooth curve, few enough for a page of 18 points


def _finite(value: float | None) -> bool:
    return value is not None and math.isfinite(value)


def line(
    title: str,
    series: Sequence[Series],
    *,
    xlabel: str,
    ylabel: str,
    logx: bool = False,
    logy: bool = False,
    lines: bool = True,
    empty: str = "no data",
    flagged: Sequence[Sequence[bool]] | None = None,
) -> Chart:
    """Lines through each (label, xs, ys) series; pairs with a missing value are left out, and a pair that cannot sit
    on a log axis (≤ 0) too. `flagged[s][i]` marks series s's i-th pair as an invalid measurement."""
    drawn = []
    for s, (label, xs, ys) in enumerate(series):
        flags = list(flagged[s]) if flagged is not None else [False] * len(xs)
        kept = [
            (x, y, f)
            for x, y, f in zip(xs, ys, flags, strict=False)
            if _finite(x) and _finite(y) and not (logx and x <= 0) and not (logy and y <= 0)  # type: ignore[operator]
        ]
        if kept:
            drawn.append(
                {
                    "label": label,
                    "x": [k[0] for k in kept],
                    "y": [k[1] for k in kept],
                    "invalid": [i for i, k in enumerate(kept) if k[2]],
                }
            )
    chart: Chart = {
        "kind": "line",
        "title": title,
        "x": {"label": xlabel, "log": logx},
        "y": {"label": ylabel, "log": logy},
        "lines": lines,
        "series": drawn,
    }
    if not drawn:
        chart["empty"] = empty
    return chart


def bars(
    title: str, labels: Sequence[str], stacks: Mapping[str, Sequence[float | None]], *, ylabel: str, empty: str = "no data"
) -> Chart:
    """Stacked bars: one bar per label, one colour per stack name (a missing value is no bar, not zero)."""
    values = {name: [v if _finite(v) else None for v in vals] for name, vals in stacks.items()}
    chart: Chart = {
        "kind": "bar",
        "title": title,
        "labels": list(labels),
        "y": {"label": ylabel, "log": False},
        "stacks": [{"label": name, "values": vals} for name, vals in values.items()],
    }
    if not labels or not any(v for vals in values.values() for v in vals):
        chart["empty"] = empty
    return chart


def heat(title: str, grid: HeatMap, *, xlabel: str, ylabel: str, empty: str = "no data") -> Chart:
    """A value per (x, y) cell, coloured from the lowest to the highest."""
    cells = [[c.x, c.y, c.value] for c in grid.cells if _finite(c.value)]
    chart: Chart = {
        "kind": "heatmap",
        "title": title,
        "xs": list(grid.xs),
        "ys": list(grid.ys),
        "cells": cells,
        "x": {"label": xlabel},
        "y": {"label": ylabel},
    }
    if not cells:
        chart["empty"] = empty
    return chart


def _cdf_series(points: list[PointResult], raw: dict[int, np.ndarray], sweep: dict[str, list[Any]] | None = None) -> list[Series]:
    series: list[Series] = []
    for p in points:
        config = f" {sweep_label(sweep, p.point.server)}" if sweep else ""
        label = f"#{p.point.index} {p.point.backend}{config} b{p.point.batch_size} {p.point.load_label()}"
        label += "" if p.valid else " INVALID"
        lat = raw.get(p.point.index)
        if lat is not None and lat.size:
            qs = np.linspace(0, 1, CDF_QUANTILES)
            series.append((label, np.quantile(lat, qs).round(4).tolist(), (qs * 100).round(3).tolist()))
        elif p.latency_ms is not None:
            pc = p.latency_ms
            series.append(
                (label + " (percentiles)", [pc.p50, pc.p90, pc.p95, pc.p99, pc.p999, pc.max], [50, 90, 95, 99, 99.9, 100])
            )
    return series


def job_charts(
    points: list[PointResult], raw: dict[int, np.ndarray], slo: SLO | None = None, sweep: dict[str, list[Any]] | None = None
) -> list[Chart]:
    """The job's charts: CDF, latency vs throughput, timeline, stages, resources, cold start, and each search's probes."""
    charts = [
        line(
            "Latency CDF per point",
            _cdf_series(points, raw, sweep),
            xlabel="latency from intended time (ms)",
            ylabel="percent of requests",
            logx=True,
            empty="no latencies yet",
        )
    ]
    ladders: dict[str, list[PointResult]] = {}
    for p in points:
        config = f" {sweep_label(sweep, p.point.server)}" if sweep else ""  # a sweep: one line per configuration
        ladders.setdefault(f"{p.point.backend} b{p.point.batch_size}{config}", []).append(p)
    ordered = {k: sorted(v, key=lambda p: p.point.rate) for k, v in ladders.items()}
    charts.append(
        _curves(
            "p99 latency vs throughput (one line per configuration; ringed red: invalid)",
            ordered,
            lambda p: (p.achieved_rate, p.latency_ms.p99 if p.latency_ms else None),
            xlabel="achieved throughput (req/s)",
            ylabel="p99 ms",
        )
    )
    timeline = [(f"#{p.point.index} p99", [w.t_s for w in p.windows], [w.p99_ms for w in p.windows]) for p in points if p.windows]
    charts.append(
        line(
            "Timeline: p99 per window",
            timeline,
            xlabel="seconds into the measured part",
            ylabel="p99 ms",
            empty="no per-window metrics were reported",
        )
    )
    labels = [f"#{p.point.index}" for p in points]
    stage_names = sorted({name for p in points for name in (p.stages_ms or {})})
    stages = {s: [(p.stages_ms or {}).get(s) for p in points] for s in stage_names}
    charts.append(bars("Stage breakdown (mean ms)", labels, stages, ylabel="ms", empty="no stage breakdown was measured"))
    res = [p.resources for p in points]
    resource_charts = [
        (
            "Server CPU (mean %)",
            "cpu %",
            [r.server_cpu_percent_mean if r else None for r in res],
            "% of one core",
            "no resource samples",
        ),
        (
            "GPU utilisation (mean %)",
            "gpu %",
            [r.gpu_util_percent_mean if r else None for r in res],
            "%",
            "no GPU on this host (not measured, not zero)",
        ),
    ]
    for title, name, values, ylabel, empty in resource_charts:
        charts.append(bars(title, labels, {name: values}, ylabel=ylabel, empty=empty))
    cold = [p.cold_start for p in points]
    stacks = {
        "to ready": [c.to_ready_s if c else None for c in cold],
        "ready → first answer": [(c.to_first_answer_s - c.to_ready_s) if c else None for c in cold],
    }
    charts.append(bars("Cold start (s)", labels, stacks, ylabel="s", empty="no cold start measured"))
    windowed = [p for p in points if p.llm is not None and p.windows]
    if windowed:  # a language model's point over time: the load offered and served, and its first tokens' wait
        charts.append(
            line(
                "Timeline: offered and answered req/s per window",
                [
                    (f"#{p.point.index} {kind}", [w.t_s for w in p.windows], [v(w) for w in p.windows])
                    for p in windowed
                    for kind, v in (("offered", lambda w: w.requests / w.duration_s), ("answered", lambda w: w.throughput))
                ],
                xlabel="seconds into the measured part",
                ylabel="req/s",
            )
        )
        charts.append(
            line(
                "Timeline: TTFT p99 per window",
                [(f"#{p.point.index}", [w.t_s for w in p.windows], [w.ttft_p99_ms for w in p.windows]) for p in windowed],
                xlabel="seconds into the measured part",
                ylabel="TTFT p99 ms",
                empty="no per-window TTFT was reported",
            )
        )
    llm = {k: [p for p in v if p.llm is not None] for k, v in ordered.items()}
    llm = {k: v for k, v in llm.items() if v}
    if llm:  # a language model's decision curves: the work served against what each user waits
        for name, attr in (("TPOT", "tpot_ms"), ("TTFT", "ttft_ms")):
            charts.append(
                _curves(
                    f"Output tokens/s vs {name} p99 (one line per configuration; ringed red: invalid)",
                    llm,
                    lambda p, attr=attr: _tokens_and(p, attr),
                    xlabel="output tokens/s (the server's count)",
                    ylabel=f"{name} p99 ms",
                )
            )
    charts += [search_chart(p, slo) for p in points if p.search is not None]
    return charts


def _tokens_and(p: PointResult, attr: str) -> tuple[float | None, float | None]:
    figures = p.llm
    if figures is None:
        return None, None
    latency = getattr(figures, attr)
    return figures.output_tokens_per_s, latency.p99 if latency is not None else None


def pareto(pairs: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """The points no other beats on both counts (more served, less waited), in order of what they serve."""
    front: list[tuple[float, float]] = []
    for x, y in sorted(pairs, key=lambda xy: (-xy[0], xy[1])):
        if not front or y < front[-1][1]:
            front.append((x, y))
    return sorted(front)


def _curves(
    title: str,
    lines: Mapping[str, list[PointResult]],
    xy: Any,
    *,
    xlabel: str,
    ylabel: str,
) -> Chart:
    """One line per configuration (x: what it served, y: what its users waited), invalid points ringed, and with
    several configurations the Pareto front of the valid points across them."""
    series: list[Series] = []
    flagged: list[list[bool]] = []
    for label, points in lines.items():
        pairs = [xy(p) for p in points]
        series.append((label, [x for x, _ in pairs], [y for _, y in pairs]))
        flagged.append([not p.valid for p in points])
    valid = [xy(p) for points in lines.values() for p in points if p.valid]
    front = pareto([(x, y) for x, y in valid if _finite(x) and _finite(y)])
    if len(lines) > 1 and front:
        series.append(("Pareto front", [x for x, _ in front], [y for _, y in front]))
        flagged.append([False] * len(front))
    return line(title, series, xlabel=xlabel, ylabel=ylabel, flagged=flagged)


def search_chart(p: PointResult, slo: SLO | None) -> Chart:
    """A search point's probes against the load: the p99 (or, for a language model's goodput search, the share of
    requests meeting the SLO) through every probe in load order, the failing ones ringed, the limit as a line and the
    load found marked."""
    answer = p.search
    assert answer is not None
    share = any(probe.attainment is not None for probe in answer.probes) and slo is not None and slo.per_request

    def figure(probe: SearchProbe) -> float | None:
        return probe.attainment if share else probe.p99_ms

    limit = (slo.attainment if share else slo.p99_ms) if slo is not None else None
    probes = sorted(answer.probes, key=lambda x: x.load)
    name = "attainment" if share else "p99"
    series: list[Series] = [(f"{name} at each probe", [x.load for x in probes], [figure(x) for x in probes])]
    flagged = [[not x.passed for x in probes]]
    if limit is not None and probes:
        series.append(("the SLO's limit", [probes[0].load, probes[-1].load], [limit, limit]))
        flagged.append([False, False])
    if answer.found is not None:
        at = next((figure(x) for x in answer.probes if x.load == answer.found), None)
        series.append((f"found: {answer.found:g} {answer.unit}", [answer.found], [at]))
        flagged.append([False])
    return line(
        f"Search #{p.point.index}: {name} against load ({answer.stopped.replace('_', ' ')}; ringed red: failed)",
        series,
        xlabel=f"offered load ({answer.unit})",
        ylabel="share of requests meeting the SLO" if share else "p99 ms",
        flagged=flagged,
        empty="no probe has a figure",
    )


def roofline_chart(data: Roofline) -> Chart:
    """The roofline on log-log axes, ceilings first."""
    if not data.measured:
        return line("Roofline", [], xlabel="", ylabel="", empty="no valid points of models with countable dense layers")
    return line(
        "Roofline (FP32 ceilings)",
        data.ceilings + data.measured,
        xlabel="arithmetic intensity (FLOP/byte)",
        ylabel="FLOP/s",
        logx=True,
        logy=True,
    )


def heatmap_chart(grid: HeatMap, metric: str, x: str, y: str) -> Chart:
    """The heat map of `metric` over two hyper-parameters."""
    return heat(f"{metric} over {x} × {y}", grid, xlabel=x, ylabel=y, empty=f"no valid points with {metric}")


def cost_chart(cost_rows: list[dict[str, Any]]) -> Chart:
    """Cost per 1M requests by hardware class."""
    return bars(
        "Cost per 1M requests by hardware",
        [c["hardware"] for c in cost_rows],
        {"cost": [c["cost"] for c in cost_rows]},
        ylabel="per 1M requests",
        empty="no cost measured (needs resource sampling and a configured price)",
    )
