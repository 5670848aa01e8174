"""The heat map: one metric averaged over the valid points in each cell of two hyper-parameters."""

from __future__ import annotations

import statistics
from typing import Any

from pydantic import BaseModel

from common.errors import InvalidRequest

METRICS = ("p99_ms", "p50_ms", "throughput", "samples_per_s", "gpu_util", "cost_usd_per_1m", "energy_wh_per_1m")
# depth/width/kind/input_size exist only on rows of canonical models: rows without the axis are left out of the map.
PARAMS = ("batch_size", "rate", "model", "backend", "hardware", "depth", "width", "kind", "input_size")


class HeatCell(BaseModel):
    """One cell: the axis labels, the mean of the metric and how many points it averages."""

    x: str
    y: str
    value: float
    points: int


class HeatMap(BaseModel):
    """The cells of one metric over two axes, with the axis labels in display order."""

    metric: str
    x: str
    y: str
    xs: list[str]
    ys: list[str]
    cells: list[HeatCell]


def check_args(metric: str, x: str, y: str) -> None:
    """InvalidRequest naming the field when the metric or an axis is not one the map knows."""
    if metric not in METRICS:
        raise InvalidRequest(f"metric must be one of {', '.join(METRICS)}", field="metric")
    for name, value in (("x", x), ("y", y)):
        if value not in PARAMS:
            raise InvalidRequest(f"{name} must be one of {', '.join(PARAMS)}", field=name)


def label(value: Any) -> str:
    """An axis label: floats without trailing zeros."""
    return f"{value:g}" if isinstance(value, float) else str(value)


def order(text: str) -> tuple[int, float, str]:
    """Numbers first in numeric order, then text."""
    try:
        return (0, float(text), text)
    except ValueError:
        return (1, 0.0, text)


def heat_map(rows: list[dict[str, Any]], *, metric: str, x: str, y: str) -> HeatMap:
    """The mean of `metric` per (x, y) over the valid rows that have both axes and the metric."""
    check_args(metric, x, y)
    cells: dict[tuple[str, str], list[float]] = {}
    for row in rows:
        if not row.get("valid") or row.get(metric) is None or row.get(x) is None or row.get(y) is None:
            continue
        cells.setdefault((label(row[x]), label(row[y])), []).append(row[metric])
    return HeatMap(
        metric=metric,
        x=x,
        y=y,
        xs=sorted({k[0] for k in cells}, key=order),
        ys=sorted({k[1] for k in cells}, key=order),
        cells=[HeatCell(x=k[0], y=k[1], value=statistics.fmean(v), points=len(v)) for k, v in sorted(cells.items())],
    )
