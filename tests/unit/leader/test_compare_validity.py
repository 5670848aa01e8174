"""Compare judges valid points only: a pair with an invalid side shows its figures and its reasons, is judged "invalid"
(never a regression or an improvement), and is counted apart from the regressions, in both directions."""

from __future__ import annotations

import asyncio
from typing import Any

from common.wire.analysis import CompareResponse
from leader.analysis.compare import compare_rows
from leader.store.leaderboard import row_from_result

SEND_LAG = {"code": "send_lag", "text": "send lag p99 2.1 ms > 1 ms"}


def _row(job: str, index: int, p99: float, *, reasons: list[dict[str, str]] | None = None) -> dict[str, Any]:
    point = {"index": index, "backend": "onnxruntime", "batch_size": 1, "pattern": "poisson", "rate": 100.0 + index}
    result = {
        "point": point,
        "environment": {"cpu_model": "cpu", "follower_id": "f"},
        "latency_ms": {"p99": p99},
        "valid": not reasons,
        "reasons": reasons or [],
    }
    return row_from_result(job_id=job, job_name=job, model="m:1", slo_p99_ms=None, attempt=1, result=result)


def _compare(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> CompareResponse:
    async def no_records(_row: dict[str, Any]) -> None:
        return None

    return asyncio.run(compare_rows(a, b, a="a", b="b", load_latencies=no_records))


def test_an_invalid_side_decides_no_verdict_and_is_shown_with_its_reason() -> None:
    # Point 0: B is 3x slower but invalid (send lag). Point 1: both valid and B 3x slower: a real regression.
    a = [_row("a", 0, 10.0), _row("a", 1, 10.0)]
    b = [_row("b", 0, 30.0, reasons=[SEND_LAG]), _row("b", 1, 30.0)]
    answer = _compare(a, b)
    first, second = answer.points
    assert (first.verdict, first.a_valid, first.b_valid) == ("invalid", True, False)
    assert first.b_reasons == [SEND_LAG["text"]] and first.a_reasons == []
    assert first.change is not None and abs(first.change - 2.0) < 1e-9  # the figures are still shown
    assert (second.verdict, second.a_valid, second.b_valid) == ("regression", True, True)
    assert (answer.regressions, answer.invalid) == (1, 1)


def test_the_reverse_of_an_invalid_point_is_no_improvement() -> None:
    answer = _compare([_row("b", 0, 30.0, reasons=[SEND_LAG])], [_row("a", 0, 10.0)])
    (point,) = answer.points
    assert (point.verdict, point.a_valid, point.a_reasons) == ("invalid", False, [SEND_LAG["text"]])
    assert (answer.regressions, answer.invalid) == (0, 1)


def test_a_point_on_one_side_only_is_missing_not_invalid() -> None:
    answer = _compare([_row("a", 0, 10.0)], [_row("b", 1, 10.0, reasons=[SEND_LAG])])
    assert [(p.verdict, p.a_valid, p.b_valid) for p in answer.points] == [("missing", True, None), ("missing", None, False)]
    assert (answer.regressions, answer.invalid) == (0, 0)


def test_a_row_stored_before_rows_kept_reasons_still_says_it_is_invalid() -> None:
    old = _row("b", 0, 30.0, reasons=[SEND_LAG])
    del old["invalid_reasons"]
    (point,) = _compare([_row("a", 0, 10.0)], [old]).points
    assert point.verdict == "invalid" and point.b_reasons and "invalid" in point.b_reasons[0]
