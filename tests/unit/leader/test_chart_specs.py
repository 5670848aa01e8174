"""The charts' specs (leader/web/charts.py): what reaches the page's chart library, and that it reaches it safely."""

from __future__ import annotations

import json
import re

import pytest

from common.wire.results import PointResult
from leader.analysis import hardware
from leader.analysis.heatmap import HeatCell, HeatMap
from leader.analysis.roofline import Roofline, roof
from leader.web import charts
from leader.web.render import env
from tests.integration.leader.conftest import point_result


def _point(index: int, backend: str, *, mean_ms: float = 4.0, stages: dict[str, float] | None = None) -> PointResult:
    body = point_result(index, "f", backend=backend)
    body["latency_ms"] = {**body["latency_ms"], "mean": mean_ms}
    body["achieved_rate"] = 50.0  # both configurations served exactly their one rate: one x for both
    body["stages_ms"] = stages
    return PointResult.model_validate(body)


def test_a_line_keeps_only_drawable_pairs_and_marks_invalid_ones_by_their_kept_position() -> None:
    spec = charts.line("t", [("a", [1, None, 2, 0, 4], [5, 6, None, 7, 8])], xlabel="x", ylabel="y", logx=True,
                       flagged=[[False, True, False, False, True]])  # fmt: skip
    # None on either side and x = 0 on a log axis are left out; the invalid 5th pair is the 2nd one kept.
    assert spec["series"] == [{"label": "a", "x": [1, 4], "y": [5, 8], "invalid": [1], "bare": False}]
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


def test_a_one_rate_job_has_a_marked_pair_for_every_configuration() -> None:
    """Two backends at one rate, the same achieved rate: each configuration's line is one pair, and every measured
    series is drawn with its marks (the page drew nothing for such a job: tests/e2e/web/test_pages.py checks the ink)."""
    ladder = next(c for c in charts.job_charts([_point(0, "onnxruntime"), _point(1, "triton")], {}) if "throughput" in c["title"])
    drawn = {s["label"]: (s["x"], s["y"], s["bare"]) for s in ladder["series"]}
    assert drawn["onnxruntime b1"] == ([50.0], [2.0], False) and drawn["triton b1"] == ([50.0], [2.0], False)


def test_stages_stack_disjointly_to_the_mean_latency_in_the_order_a_request_passes_them() -> None:
    """The service total is not stacked on its own parts (bars twice the latency); the wait before the send is."""
    stages = {"queue": 0.5, "infer": 2.0, "encode": 0.3, "transmission": 0.67, "service": 3.47}
    points = [_point(0, "onnxruntime", mean_ms=4.0, stages=stages), _point(1, "triton", mean_ms=3.47, stages=stages)]
    chart = next(c for c in charts.job_charts(points, {}) if c["title"].startswith("Stage breakdown"))
    labels = [s["label"] for s in chart["stacks"]]
    assert labels == [charts.BEFORE_SEND, "queue", "infer", "encode", "transmission"]
    tops = [sum(s["values"][i] for s in chart["stacks"]) for i in range(2)]
    assert tops == pytest.approx([4.0, 3.47], abs=1e-9)  # each stack is its point's mean latency
    assert chart["stacks"][0]["values"] == pytest.approx([0.53, 0.0], abs=1e-9)


def test_a_roof_is_the_bandwidth_slope_to_the_ridge_then_the_compute_flat_drawn_bare() -> None:
    a100 = hardware.HARDWARE["A100"]
    label, xs, ys = roof("A100", 1.0, 1000.0)
    ridge = a100.fp32_flops / a100.bandwidth
    assert label == "ceiling A100" and xs == [1.0, ridge, 1000.0]
    assert ys == [a100.bandwidth * 1.0, a100.fp32_flops, a100.fp32_flops]
    spec = charts.roofline_chart(Roofline(measured=[("m on A100", [4.0], [1e12])], ceilings=[(label, xs, ys)]))
    assert [(s["label"], s["bare"]) for s in spec["series"]] == [("ceiling A100", True), ("m on A100", False)]
    assert spec["x"]["log"] and spec["y"]["log"]
