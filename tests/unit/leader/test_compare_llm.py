"""Compare for language models: TTFT, TPOT and ITL p99 and output tokens/s of B against A, each with a block-bootstrap
95% CI of the difference from both points' token records; a slower first token is a regression, the same run again is
not, and without records the rows' figures are compared with no interval."""

from __future__ import annotations

from typing import Any

import numpy as np

from common.spec.job import PointSpec
from common.wire import records
from common.wire.results import PointResult
from leader.analysis.compare import Measured, compare_llm
from leader.analysis.records import measured_latencies_ms, measured_llm

N, GAP_MS, EVENTS, STEP_MS = 600, 10.0, 16, 5.0  # 600 requests 10 ms apart, 16 token events 5 ms apart each


def _blob(ttft_ms: float, seed: int) -> bytes:
    rng = np.random.default_rng(seed)
    intended = (np.arange(N) * GAP_MS * 1e6).astype(np.int64)
    first = intended + (rng.lognormal(np.log(ttft_ms), 0.3, N) * 1e6).astype(np.int64)
    events = first[:, None] + (np.arange(EVENTS) * STEP_MS * 1e6).astype(np.int64)[None, :]
    done = events[:, -1] + 1_000_000
    columns = {
        "intended_ns": intended,
        "sent_ns": intended,
        "first_byte_ns": first,
        "done_ns": done,
        "status": np.full(N, 200),
        "capped": np.zeros(N),
    }
    llm = {
        "llm_prompt_tokens": np.full(N, 48),
        "llm_completion_tokens": np.full(N, EVENTS),
        "llm_events": np.full(N, EVENTS),
        "llm_token_ns": events.ravel(),
        "llm_token_offsets": np.arange(N + 1) * EVENTS,
    }
    return records.encode(columns, {}, start_ns=0, llm=llm)


def _measured(blob: bytes) -> Measured:
    point = PointSpec(index=0, backend="vllm", batch_size=1, pattern="poisson", rate=100, duration_s=6, warmup_s=0, seed=1)
    result = PointResult.model_construct(point=point, measured_s=N * GAP_MS / 1e3)
    arrays = records.decode(blob)
    return Measured(measured_latencies_ms(arrays, result), measured_llm(arrays, result))


def _row(ttft: float) -> dict[str, Any]:
    return {"ttft_p99_ms": ttft, "tpot_p99_ms": STEP_MS, "itl_p99_ms": STEP_MS, "tokens_per_s": EVENTS * 1e3 / GAP_MS}


def test_the_token_series_are_the_points_own_definitions() -> None:
    series = _measured(_blob(20.0, 1)).llm
    assert series is not None and len(series.ttft_ms[1]) == N and series.window_s == 6.0
    assert np.allclose(series.tpot_ms[1], STEP_MS * (EVENTS - 1) / (EVENTS - 1))  # (last - first) / (tokens - 1)
    assert len(series.itl_ms[1]) == N * (EVENTS - 1) and np.allclose(series.itl_ms[1], STEP_MS)
    assert series.tokens[1].sum() == N * EVENTS
    assert len(series.prompt_tokens) == N and set(series.prompt_tokens.tolist()) == {48}


def test_the_prefill_chart_draws_each_requests_ttft_against_its_prompt() -> None:
    from leader.web.curves import prefill_chart

    chart = prefill_chart(3, np.array([5.0, 9.0, 7.0, 1.0]), np.array([100, 400, 200, -1]))
    (series,) = chart["series"]
    assert chart["title"] == "TTFT against prompt length, point #3 (each request)"
    assert (series["x"], series["y"]) == ([100.0, 200.0, 400.0], [5.0, 7.0, 9.0])  # an unknown length is left out


def test_a_slower_first_token_is_a_regression_and_the_same_run_again_is_not() -> None:
    a, same, slower = _measured(_blob(20.0, 1)), _measured(_blob(20.0, 2)), _measured(_blob(30.0, 3))
    worse = {m.metric: m for m in compare_llm(_row(20), _row(30), a, slower, threshold=0.1)}
    ttft = worse["ttft_p99_ms"]
    assert ttft.verdict == "regression" and ttft.ci_low is not None and ttft.ci_low > 0 and ttft.change is not None
    assert ttft.change > 0.3  # ~+50% at the p99
    assert worse["tpot_p99_ms"].verdict == worse["itl_p99_ms"].verdict == worse["tokens_per_s"].verdict == "unchanged"
    again = {m.metric: m for m in compare_llm(_row(20), _row(20), a, same, threshold=0.1)}
    assert all(m.verdict == "unchanged" and m.ci_low is not None for m in again.values()), again
    tokens = again["tokens_per_s"]
    assert tokens.ci_low is not None and tokens.ci_high is not None and tokens.ci_low <= 0 <= tokens.ci_high


def test_without_records_the_rows_are_compared_with_no_interval() -> None:
    fewer = _row(20) | {"tokens_per_s": 800.0}
    summary = {m.metric: m for m in compare_llm(_row(20), fewer, None, None, threshold=0.1)}
    assert summary["tokens_per_s"].verdict == "regression" and summary["tokens_per_s"].ci_low is None  # fewer tokens/s
    assert summary["ttft_p99_ms"].verdict == "unchanged"
    assert compare_llm({"ttft_p99_ms": None}, _row(20), None, None, threshold=0.1) == []  # a tensor model's point
