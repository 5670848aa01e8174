"""The charts' primitives: a chart is a spec (a JSON-ready dict) that static/charts.js draws with uPlot. Kinds: "line"
(series of x/y pairs, optional log axes, invalid points marked), "bar" (stacked bars over categories) and "heatmap" (a
value per cell of two hyper-parameters). A chart with nothing to draw carries `empty`, the reason."""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from leader.analysis.heatmap import HeatMap

Chart = dict[str, Any]
Series = tuple[str, Sequence[float | None], Sequence[float | None]]


def finite(value: float | None) -> bool:
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
    bare: Collection[str] = (),
) -> Chart:
    """Lines through each (label, xs, ys) series; pairs with a missing value are left out, and a pair that cannot sit
    on a log axis (≤ 0) too. `flagged[s][i]` marks series s's i-th pair as an invalid measurement. A measured
    series has a mark at each pair; the series labelled in `bare` (a ceiling, a limit) are drawn as lines alone."""
    drawn = []
    for s, (label, xs, ys) in enumerate(series):
        flags = list(flagged[s]) if flagged is not None else [False] * len(xs)
        kept = [
            (x, y, f)
            for x, y, f in zip(xs, ys, flags, strict=False)
            if finite(x) and finite(y) and not (logx and x <= 0) and not (logy and y <= 0)  # type: ignore[operator]
        ]
        if kept:
            drawn.append(
                {
                    "label": label,
                    "x": [k[0] for k in kept],
                    "y": [k[1] for k in kept],
                    "invalid": [i for i, k in enumerate(kept) if k[2]],
                    "bare": label in bare,
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
    values = {name: [v if finite(v) else None for v in vals] for name, vals in stacks.items()}
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
    cells = [[c.x, c.y, c.value] for c in grid.cells if finite(c.value)]
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
