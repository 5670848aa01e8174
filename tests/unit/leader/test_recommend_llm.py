"""The recommender answers a language model's question: TTFT and TPOT p99 limits, a traffic target in output tokens/s
and a budget per 1M output tokens; the most tokens/s first, each configuration (server options included) once with
its evidence; with nothing that qualifies, which constraint failed, the closest point and what to run."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from common.wire.analysis import RecommendQuery
from leader.analysis.recommend import recommend


def _row(
    i: int,
    *,
    tokens: float,
    ttft: float,
    tpot: float,
    cost: float | None,
    options: str = "",
    valid: bool = True,
    ttft_high: float | None = None,
) -> dict[str, Any]:
    return {
        "_id": f"j:{i}",
        "job_id": "j",
        "job_name": "j",
        "attempt": 1,
        "index": i,
        "model": "llama:1",
        "backend": "vllm",
        "hardware": "cpu",
        "follower_id": "f",
        "batch_size": 1,
        "pattern": "poisson",
        "rate": 10.0 + i,
        "load": f"{10 + i} req/s",
        "throughput": tokens / 16,
        "p99_ms": ttft + 16 * tpot,
        "valid": valid,
        "ttft_p99_ms": ttft,
        "ttft_p99_ci_high_ms": ttft_high,
        "tpot_p99_ms": tpot,
        "tokens_per_s": tokens,
        "cost_usd_per_1m_tokens": cost,
        "options": options,
    }


ROWS = [
    _row(0, tokens=900.0, ttft=150.0, tpot=20.0, cost=2.0, options='{"llm":{"max_num_seqs":8}}', ttft_high=180.0),
    _row(1, tokens=1500.0, ttft=400.0, tpot=30.0, cost=1.2, options='{"llm":{"max_num_seqs":32}}', ttft_high=650.0),
    _row(2, tokens=1200.0, ttft=250.0, tpot=25.0, cost=1.5, options='{"llm":{"max_num_seqs":16}}', ttft_high=280.0),
    _row(3, tokens=5000.0, ttft=90.0, tpot=10.0, cost=0.5, valid=False),  # invalid: never evidence
    _row(4, tokens=1100.0, ttft=240.0, tpot=24.0, cost=1.6, options='{"llm":{"max_num_seqs":16}}', ttft_high=260.0),
]


def test_the_most_output_tokens_per_second_within_ttft_and_tpot_come_first() -> None:
    answer = recommend(ROWS, RecommendQuery(ttft_ms=500, tpot_ms=35))
    assert [(r.evidence.index, r.options) for r in answer.recommendations] == [
        (1, '{"llm":{"max_num_seqs":32}}'),
        (2, '{"llm":{"max_num_seqs":16}}'),
        (0, '{"llm":{"max_num_seqs":8}}'),
    ]
    assert answer.recommendations[1].candidates == 2 and answer.considered == 4  # max_num_seqs 16 measured twice
    assert answer.recommendations[0].cost_usd_per_1m_tokens == 1.2 and answer.missing is None
    assert answer.query.llm and answer.query.describe() == "TTFT p99 <= 500 ms, TPOT p99 <= 35 ms"


def test_confident_holds_ttft_at_its_interval_and_the_traffic_and_budget_bind() -> None:
    sure = recommend(ROWS, RecommendQuery(ttft_ms=500, tpot_ms=35, confident=True))
    assert [r.evidence.index for r in sure.recommendations] == [2, 0]  # max_num_seqs 32's TTFT CI reaches 650 ms
    busy = recommend(ROWS, RecommendQuery(ttft_ms=500, tpot_ms=35, min_tokens_per_s=1000, max_cost_per_1m_tokens=1.55))
    assert [r.evidence.index for r in busy.recommendations] == [1, 2]


def test_with_nothing_that_qualifies_it_says_what_to_run() -> None:
    strict = recommend(ROWS, RecommendQuery(ttft_ms=100, tpot_ms=35))
    assert strict.recommendations == [] and strict.missing is not None
    assert strict.missing.startswith("not enough evidence: none of 4 valid language-model points meets TTFT p99 <= 100 ms")
    assert 'the closest, vllm ({"llm":{"max_num_seqs":8}}) on cpu' in strict.missing and "50% over" in strict.missing
    assert "slo: {ttft_ms: 100, tpot_ms: 35}" in strict.missing
    busy = recommend(ROWS, RecommendQuery(ttft_ms=500, tpot_ms=35, min_tokens_per_s=2000))
    assert busy.missing is not None and "none carries the traffic asked; the most, 1500.0 output tokens/s" in busy.missing
    poor = recommend(ROWS, RecommendQuery(ttft_ms=500, tpot_ms=35, max_cost_per_1m_tokens=0.1))
    assert poor.missing is not None and "none the budget; the cheapest" in poor.missing and "costs 1.2 per 1M" in poor.missing
    nobody = recommend(ROWS, RecommendQuery(ttft_ms=500, model="other:1"))
    assert nobody.missing == (
        "not enough evidence: no valid language-model point of model other:1 in the history you can see; run a search "
        "(load: {search: {low: ..., high: ...}}, slo: {ttft_ms: 500}) to measure one"
    )


def test_a_query_names_its_slo() -> None:
    with pytest.raises(ValidationError, match="p99_ms, or for a language model ttft_ms"):
        RecommendQuery(min_tokens_per_s=100)
