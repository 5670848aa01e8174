"""The pages' charts as data: each is a spec (a JSON-ready dict, leader/web/chartkit.py) that static/charts.js draws
with uPlot (hover values, drag to zoom, double-click to reset, click a legend entry to hide its series). Here only
what to draw is decided; the curves a decision is made from are leader/web/curves.py's."""

from __future__ import annotations

from typing import Any

import numpy as np

from common.spec.slo import SLO
from common.spec.sweep import label as sweep_label
from common.stats import quantiles
from common.wire.imports import TOOL_NAMES
from common.wire.results import SERVICE_TOTAL, STAGE_ORDER, PointResult
from leader.analysis.heatmap import HeatMap
from leader.analysis.roofline import Roofline
from leader.web.chartkit import Chart, Series, bars, heat, line
from leader.web.curves import curves, goodput_chart, search_chart, server_charts, tokens_and

CDF_QUANTILES = 200  # points per CDF curve: enough for a smooth curve, few enough for a page of 18 points


def _cdf_series(points: list[PointResult], raw: dict[int, np.ndarray], sweep: dict[str, list[Any]] | None = None) -> list[Series]:
    series: list[Series] = []
    for p in points:
        config = f" {sweep_label(sweep, p.point.server)}" if sweep else ""
        label = f"#{p.point.index} {p.point.backend}{config} b{p.point.batch_size} {p.point.load_label()}"
        label += " (not judged)" if p.imported else ("" if p.valid else " INVALID")
        lat = raw.get(p.point.index)
        if lat is not None and lat.size:
            qs = np.linspace(0, 1, CDF_QUANTILES)
            series.append((label, quantiles(lat, qs).round(4).tolist(), (qs * 100).round(3).tolist()))
        elif p.latency_ms is not None:
            pc = p.latency_ms
            known = [
                (v, q)
                for v, q in zip((pc.p50, pc.p90, pc.p95, pc.p99, pc.p999, pc.max), (50, 90, 95, 99, 99.9, 100), strict=True)
                if v is not None
            ]
            series.append((label + " (percentiles)", [v for v, _ in known], [q for _, q in known]))
    return series


def job_charts(
    points: list[PointResult], raw: dict[int, np.ndarray], slo: SLO | None = None, sweep: dict[str, list[Any]] | None = None
) -> list[Chart]:
    """The job's charts: CDF, latency vs throughput, timeline, stages, resources, cold start, and each search's probes.
    An imported job's are its tool's figures, labelled with its definition of latency (the point pages say it whole)."""
    tool = next((p.imported for p in points if p.imported is not None), None)
    charts = [
        line(
            "Latency CDF per point",
            _cdf_series(points, raw, sweep),
            xlabel=f"latency as {TOOL_NAMES[tool.tool]} counts it (ms)" if tool else "latency from intended time (ms)",
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
        curves(
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
    charts.append(stage_chart(points, labels))
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
        charts += server_charts(windowed)
    llm = {k: [p for p in v if p.llm is not None] for k, v in ordered.items()}
    llm = {k: v for k, v in llm.items() if v}
    if llm:  # a language model's decision curves: the work served against what each user waits
        for name, attr in (("TPOT", "tpot_ms"), ("TTFT", "ttft_ms")):
            charts.append(
                curves(
                    f"Output tokens/s vs {name} p99 (one line per configuration; ringed red: invalid)",
                    llm,
                    lambda p, attr=attr: tokens_and(p, attr),
                    xlabel=f"output tokens/s ({TOOL_NAMES[tool.tool]}'s count)"
                    if tool
                    else "output tokens/s (the server's count)",
                    ylabel=f"{name} p99 ms",
                )
            )
        charts.append(goodput_chart(llm, slo))
    charts += [search_chart(p, slo) for p in points if p.search is not None]
    return charts


BEFORE_SEND = "before send"  # from the intended time to the send: send lag and any wait for an in-flight slot


def before_send(p: PointResult) -> float | None:
    """The mean time a point's requests waited to be sent: its mean latency (from the intended time) less its mean
    service time (from the send), over the same answered requests; None without both."""
    stages = p.stages_ms or {}
    if p.latency_ms is None or p.latency_ms.mean is None or SERVICE_TOTAL not in stages:
        return None
    return max(0.0, p.latency_ms.mean - stages[SERVICE_TOTAL])


def stage_chart(points: list[PointResult], labels: list[str]) -> Chart:
    """Each point's mean latency as a bar of its disjoint stages, in the order a request passes them: the wait before
    the send, then the service time's stages. The stack's top is the mean latency; the service total is not a stage,
    so it is not stacked on its own parts."""
    named = {name for p in points for name in (p.stages_ms or {}) if name != SERVICE_TOTAL}
    order = [s for s in STAGE_ORDER if s in named] + sorted(named - set(STAGE_ORDER))
    stages = {BEFORE_SEND: [before_send(p) for p in points]} if named else {}
    stages |= {s: [(p.stages_ms or {}).get(s) for p in points] for s in order}
    title = "Stage breakdown (mean ms; the stack is the mean latency from the intended time)"
    return bars(title, labels, stages, ylabel="ms", empty="no stage breakdown was measured")


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
        bare=[label for label, _, _ in data.ceilings],
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
