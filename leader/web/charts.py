"""The pages' charts, drawn from analysis data (leader/analysis) with leader.web.svg."""

from __future__ import annotations

from typing import Any

import numpy as np

from common.results import PointResult
from leader.analysis.heatmap import HeatMap
from leader.analysis.roofline import Roofline
from leader.web import svg


def _cdf_series(points: list[PointResult], raw: dict[int, np.ndarray]) -> list[tuple[str, list[float], list[float]]]:
    series = []
    for p in points:
        label = f"#{p.point.index} {p.point.backend} b{p.point.batch_size} {p.point.load_label()}"
        label += "" if p.valid else " INVALID"
        lat = raw.get(p.point.index)
        if lat is not None and lat.size:
            qs = np.linspace(0, 1, 200)
            series.append((label, np.quantile(lat, qs).tolist(), (qs * 100).tolist()))
        elif p.latency_ms is not None:
            pc = p.latency_ms
            series.append(
                (label + " (percentiles)", [pc.p50, pc.p90, pc.p95, pc.p99, pc.p999, pc.max], [50, 90, 95, 99, 99.9, 100])
            )
    return series


def job_charts(points: list[PointResult], raw: dict[int, np.ndarray]) -> list[str]:
    """The job's plots as SVG: CDF, latency vs throughput, timeline, stages, resources, cold start."""
    charts = [
        svg.line_chart(
            "Latency CDF per point",
            _cdf_series(points, raw),
            xlabel="latency from intended time (ms)",
            ylabel="percent of requests",
            markers=False,
            logx=True,
            empty="no latencies yet",
        )
    ]
    ladders: dict[str, list[PointResult]] = {}
    for p in points:
        ladders.setdefault(f"{p.point.backend} b{p.point.batch_size}", []).append(p)
    ordered = {k: sorted(v, key=lambda p: p.point.rate) for k, v in ladders.items()}
    curve = [(k, [p.achieved_rate for p in v], [p.latency_ms.p99 if p.latency_ms else None for p in v])
             for k, v in ordered.items()]  # fmt: skip
    charts.append(
        svg.line_chart("p99 latency vs throughput (rate ladder; hollow: invalid)", curve,
                       xlabel="achieved throughput (req/s)", ylabel="p99 ms",
                       flagged=[[not p.valid for p in v] for v in ordered.values()])  # fmt: skip
    )
    timeline = [(f"#{p.point.index} p99", [w.t_s for w in p.windows], [w.p99_ms for w in p.windows]) for p in points if p.windows]
    charts.append(
        svg.line_chart(
            "Timeline: p99 per window",
            timeline,
            xlabel="seconds into the measured part",
            ylabel="p99 ms",
            empty="no per-window metrics were reported",
        )
    )
    labels = [f"#{p.point.index}" for p in points]
    stage_names = sorted({name for p in points for name in (p.stages_ms or {})})
    charts.append(
        svg.bar_chart(
            "Stage breakdown (mean ms)",
            labels,
            {s: [(p.stages_ms or {}).get(s) for p in points] for s in stage_names},
            ylabel="ms",
            empty="no stage breakdown was measured",
        )
    )
    res = [p.resources for p in points]
    resource_charts = [
        ("Server CPU (mean %)", "cpu %", [r.server_cpu_percent_mean if r else None for r in res], "% of one core",
         "no resource samples"),
        ("GPU utilisation (mean %)", "gpu %", [r.gpu_util_percent_mean if r else None for r in res], "%",
         "no GPU on this host (not measured, not zero)"),
    ]  # fmt: skip
    for title, name, values, ylabel, empty in resource_charts:
        charts.append(svg.bar_chart(title, labels, {name: values}, ylabel=ylabel, empty=empty))
    cold = [p.cold_start for p in points]
    charts.append(
        svg.bar_chart(
            "Cold start (s)",
            labels,
            {
                "to ready": [c.to_ready_s if c else None for c in cold],
                "ready → first answer": [(c.to_first_answer_s - c.to_ready_s) if c else None for c in cold],
            },
            ylabel="s",
            empty="no cold start measured",
        )
    )
    return charts


def roofline_chart(data: Roofline) -> str:
    """The roofline on log-log axes, ceilings first."""
    if not data.measured:
        return svg.line_chart("Roofline", [], xlabel="", ylabel="", empty="no valid points of models with countable dense layers")
    return svg.line_chart("Roofline (FP32 ceilings)", data.ceilings + data.measured,
                          xlabel="arithmetic intensity (FLOP/byte)", ylabel="FLOP/s", logx=True, logy=True)  # fmt: skip


def heatmap_chart(grid: HeatMap, metric: str, x: str, y: str) -> str:
    """The heat map of `metric` over two hyper-parameters."""
    return svg.heatmap(f"{metric} over {x} × {y}", grid.xs, grid.ys, {(c.x, c.y): c.value for c in grid.cells},
                       xlabel=x, ylabel=y, empty=f"no valid points with {metric}")  # fmt: skip


def cost_chart(cost_rows: list[dict[str, Any]]) -> str:
    """Cost per 1M requests by hardware class."""
    return svg.bar_chart("Cost per 1M requests by hardware", [c["hardware"] for c in cost_rows],
                         {"cost": [c["cost"] for c in cost_rows]}, ylabel="per 1M requests",
                         empty="no cost measured (needs resource sampling and a configured price)")  # fmt: skip
