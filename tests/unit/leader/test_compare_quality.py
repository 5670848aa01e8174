"""Compare judges top-1 accuracy beside latency: B's accuracy against A's on the same point, with the 95% interval of
the difference; a fall beyond the quality threshold whose interval excludes zero is a regression (compare's exit 5),
a difference inside the interval is not, and a point without a quality check on both sides has no quality verdict."""

from __future__ import annotations

import asyncio
import math
from typing import Any

from common.wire.analysis import CompareResponse
from follower.point.quality import share
from leader.analysis.compare import compare_rows
from leader.store.leaderboard import row_from_result

SEND_LAG = {"code": "send_lag", "text": "send lag p99 2.1 ms > 1 ms"}


def _row(job: str, hits: int | None, samples: int = 540, *, reasons: list[dict[str, str]] | None = None) -> dict[str, Any]:
    point = {"index": 0, "backend": "onnxruntime", "batch_size": 1, "pattern": "poisson", "rate": 100.0}
    result: dict[str, Any] = {
        "point": point,
        "environment": {"cpu_model": "cpu", "follower_id": "f"},
        "latency_ms": {"p99": 10.0},
        "valid": not reasons,
        "reasons": reasons or [],
    }
    if hits is not None:  # as the follower stores it (common/wire/quality.py)
        result["quality"] = {"accuracy": {"top1": share(hits, samples).model_dump(), "k": 1}, "not_run": [], "seconds": 0.5}
    return row_from_result(job_id=job, job_name=job, model="m:1", slo_p99_ms=None, attempt=1, result=result)


def _compare(a: dict[str, Any], b: dict[str, Any], quality_threshold: float = 0.005) -> CompareResponse:
    async def no_records(_row: dict[str, Any]) -> None:
        return None

    return asyncio.run(compare_rows([a], [b], a="a", b="b", load_latencies=no_records, quality_threshold=quality_threshold))


def test_a_fall_in_accuracy_beyond_the_threshold_and_its_interval_is_a_regression() -> None:
    answer = _compare(_row("a", 531), _row("b", 486))  # 98.3% -> 90.0% of 540
    (point,) = answer.points
    q = point.quality
    assert q is not None and (q.a, q.b, q.a_samples, q.b_samples) == (531 / 540, 486 / 540, 540, 540)
    assert math.isclose(q.change, (486 - 531) / 540) and q.ci_low < q.change < q.ci_high < 0
    assert q.verdict == "regression" and point.verdict == "unchanged"  # the latency did not move
    assert answer.regressions == 1 and answer.quality_threshold == 0.005


def test_newcombes_interval_is_built_from_each_sides_wilson_interval() -> None:
    a, b = share(531, 540), share(486, 540)
    (point,) = _compare(_row("a", 531), _row("b", 486)).points
    assert point.quality is not None
    change = b.value - a.value
    assert point.quality.ci_low == change - math.hypot(b.value - b.low, a.high - a.value)
    assert point.quality.ci_high == change + math.hypot(b.high - b.value, a.value - a.low)


def test_a_difference_inside_its_interval_is_no_regression_however_low_the_threshold() -> None:
    # 98.3% -> 97.4% of 540: below the threshold of 0.1 points, but the interval of the difference holds zero.
    answer = _compare(_row("a", 531), _row("b", 526), quality_threshold=0.001)
    (point,) = answer.points
    assert point.quality is not None and point.quality.ci_low < 0 < point.quality.ci_high
    assert point.quality.verdict == "unchanged" and answer.regressions == 0


def test_a_fall_smaller_than_the_threshold_is_no_regression_even_outside_its_interval() -> None:
    # 10,000 samples each: 98.0% -> 97.0% is outside its interval, but a threshold of 2 points lets it pass.
    answer = _compare(_row("a", 9800, 10_000), _row("b", 9700, 10_000), quality_threshold=0.02)
    (point,) = answer.points
    assert point.quality is not None and point.quality.ci_high < 0
    assert point.quality.verdict == "unchanged" and answer.regressions == 0
    again = _compare(_row("a", 9800, 10_000), _row("b", 9700, 10_000), quality_threshold=0.005)
    assert again.points[0].quality is not None and again.points[0].quality.verdict == "regression"


def test_accuracy_is_judged_beside_an_invalid_latency() -> None:
    # B's load was invalid (its latency decides nothing), but its answers were scored after the load, one at a time.
    answer = _compare(_row("a", 531), _row("b", 486, reasons=[SEND_LAG]))
    (point,) = answer.points
    assert point.verdict == "invalid" and point.quality is not None and point.quality.verdict == "regression"
    assert (answer.regressions, answer.invalid) == (1, 1)


def test_no_quality_verdict_unless_both_sides_scored_their_answers() -> None:
    for a, b in ((_row("a", 531), _row("b", None)), (_row("a", None), _row("b", 486)), (_row("a", None), _row("b", None))):
        answer = _compare(a, b)
        assert answer.points[0].quality is None and answer.regressions == 0
