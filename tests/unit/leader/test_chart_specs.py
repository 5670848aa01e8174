"""The charts' specs (leader/web/charts.py): what reaches the page's chart library, and that it reaches it safely."""

from __future__ import annotations

import json
import re

from leader.analysis.heatmap import HeatCell, HeatMap
from leader.web import charts
from leader.web.render import env


def test_a_line_keeps_only_drawable_pairs_and_marks_invalid_ones_by_their_kept_position() -> None:
    spec = charts.line("t", [("a", [1, None, 2, 0, 4], [5, 6, None, 7, 8])], xlabel="x", ylabel="y", logx=True,
                       flagged=[[False, True, False, False, True]])  # fmt: skip
    # None on either side and x = 0 on a log axis are left out; the invalid 5th pair is the 2nd one kept.
    assert spec["series"] == [{"label": "a", "x": [1, 4], "y": [5, 8], "invalid": [1]}]
    assert spec["x"] == {"label": "x", "log": True} and "empty" not in spec
    assert charts.line("t", [("a", [None], [1])], xlabel="", ylabel="", empty="nothing yet")["empty"] == "nothing yet"


def test_bars_and_heat_maps_say_why_they_are_empty() -> None:
    full = charts.bars("b", ["p0", "p1"], {"s": [1.0, None]}, ylabel="ms")
    assert full["stacks"] == [{"label": "s", "values": [1.0, None]}] and "empty" not in full
    assert charts.bars("b", ["p0"], {"s": [None]}, ylabel="ms", empty="none measured")["empty"] == "none measured"
    cells = [HeatCell(x="1", y="50", value=2.0, points=1), HeatCell(x="8", y="50", value=4.0, points=1)]
    grid = HeatMap(metric="p99_ms", x="batch_size", y="rate", xs=["1", "8"], ys=["50"], cells=cells)
    heat = charts.heat("h", grid, xlabel="batch", ylabel="rate")
    assert heat["cells"] == [["1", "50", 2.0], ["8", "50", 4.0]] and "empty" not in heat


def test_a_hostile_title_cannot_leave_the_chart_data_script() -> None:
    """Labels come from users (job, model and backend names): the specs reach the page as JSON inside a script
    element, so "</script>" in a label must not end it, and the caption is escaped HTML."""
    spec = charts.line("</script><script>alert(1)</script>", [("<b>x</b>", [1], [1])], xlabel="", ylabel="")
    page = env.from_string('{% from "_charts.html" import chart_grid %}{{ chart_grid(charts, "c") }}').render(charts=[spec])
    data = re.search(r'<script type="application/json" id="chart-data">(.*?)</script>', page, re.S)
    assert data is not None and json.loads(data.group(1))[0]["title"] == spec["title"]
    assert page.count("<script") == 1 and "alert(1)</script>" not in page
    assert "<figcaption>&lt;/script&gt;" in page
