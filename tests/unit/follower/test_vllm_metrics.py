"""vLLM's own metrics: its Prometheus text parsed, and the server's view of a point from two snapshots (histogram
means over the run, counters' increase), whatever the labels."""

from __future__ import annotations

import pytest

from follower.backends.llmserver import parse_metrics
from follower.backends.stats import histogram_quantile, llm_server_delta

LABELS = 'engine="0",model_name="tiny"'


def snapshot(length: float, prompt: float, generated: float, queries: float, hits: float, ttft: tuple[float, float],
             itl: tuple[float, float], kv: float) -> str:  # fmt: skip
    """vLLM's /metrics text with these counter values ((count, sum) for the histograms)."""
    return "\n".join([
        "# HELP vllm:request_success_total Count of successfully processed requests.",
        "# TYPE vllm:request_success_total counter",
        f'vllm:request_success_total{{engine="0",finished_reason="length",model_name="tiny"}} {length}',
        'vllm:request_success_total{engine="0",finished_reason="stop",model_name="tiny"} 2.0',
        f"vllm:prompt_tokens_total{{{LABELS}}} {prompt}",
        f"vllm:generation_tokens_total{{{LABELS}}} {generated}",
        f"vllm:num_preemptions_total{{{LABELS}}} 0.0",
        f"vllm:prefix_cache_queries_total{{{LABELS}}} {queries}",
        f"vllm:prefix_cache_hits_total{{{LABELS}}} {hits}",
        'vllm:time_to_first_token_seconds_bucket{engine="0",le="0.01",model_name="tiny"} 6.0',
        f"vllm:time_to_first_token_seconds_count{{{LABELS}}} {ttft[0]}",
        f"vllm:time_to_first_token_seconds_sum{{{LABELS}}} {ttft[1]}",
        f"vllm:inter_token_latency_seconds_count{{{LABELS}}} {itl[0]}",
        f"vllm:inter_token_latency_seconds_sum{{{LABELS}}} {itl[1]}",
        f"vllm:kv_cache_usage_perc{{{LABELS}}} {kv}",
        f"vllm:e2e_request_latency_seconds_count{{{LABELS}}} {ttft[0]}",
        f"vllm:e2e_request_latency_seconds_sum{{{LABELS}}} {10 * ttft[1]}",
    ])  # fmt: skip


BEFORE = snapshot(10.0, 100.0, 160.0, 100.0, 0.0, (12.0, 0.12), (150.0, 0.3), 0.0)
AFTER = snapshot(50.0, 500.0, 800.0, 500.0, 100.0, (52.0, 0.52), (750.0, 1.5), 0.25)


def test_metrics_are_parsed_with_the_labels_that_tell_series_apart() -> None:
    metrics = parse_metrics(BEFORE)
    assert metrics['vllm:request_success_total{finished_reason="length"}'] == 10.0
    assert metrics['vllm:request_success_total{finished_reason="stop"}'] == 2.0
    assert metrics["vllm:prompt_tokens_total"] == 100.0 and metrics['vllm:time_to_first_token_seconds_bucket{le="0.01"}'] == 6.0


def test_the_servers_view_of_a_point_is_the_difference_of_two_snapshots() -> None:
    view = llm_server_delta({"metrics": parse_metrics(BEFORE)}, {"metrics": parse_metrics(AFTER)})
    assert view is not None
    assert (view.requests, view.prompt_tokens, view.generation_tokens) == (40, 400, 640)
    assert view.ttft_ms_mean == pytest.approx(10.0) and view.itl_ms_mean == pytest.approx(2.0)
    assert view.e2e_ms_mean == pytest.approx(100.0)  # a name with a digit in it (e2e) is read too
    assert view.prefix_cache_hit_share == pytest.approx(0.25) and view.kv_cache_usage == 0.25
    assert view.queue_ms_mean is None  # a histogram this server did not export
    assert llm_server_delta({}, {"metrics": parse_metrics(AFTER)}) is None
    assert llm_server_delta({"model_stats": []}, {"model_stats": []}) is None


def buckets(counts: dict[str, float]) -> dict[str, float]:
    return {f'vllm:time_to_first_token_seconds_bucket{{le="{le}"}}': c for le, c in counts.items()}


def test_a_histograms_quantile_over_the_run_lies_in_its_bucket_interpolated_linearly() -> None:
    before = buckets({"0.01": 5.0, "0.02": 5.0, "0.05": 5.0, "+Inf": 5.0})
    # 100 observations in the run: 40 under 10 ms, 50 in (10, 20] ms, 9 in (20, 50] ms, 1 beyond.
    after = buckets({"0.01": 45.0, "0.02": 95.0, "0.05": 104.0, "+Inf": 105.0})
    p50 = histogram_quantile(before, after, "vllm:time_to_first_token_seconds", 0.5)
    assert p50 is not None and (p50.low_ms, p50.high_ms) == (10.0, 20.0)
    assert p50.ms == pytest.approx(10.0 + 10.0 * (50 - 40) / 50)  # the 50th of 100 is the 10th of 50 in (10, 20]
    p95 = histogram_quantile(before, after, "vllm:time_to_first_token_seconds", 0.95)
    assert p95 is not None and (p95.low_ms, p95.high_ms) == (20.0, 50.0) and p95.ms == pytest.approx(20 + 30 * 5 / 9)
    assert p95.holds(30.0) and not p95.holds(19.0) and not p95.holds(51.0)
    top = histogram_quantile(before, after, "vllm:time_to_first_token_seconds", 1.0)
    assert top is not None and top.high_ms is None and top.low_ms == 50.0  # the +Inf bucket: only a lower bound
    assert histogram_quantile(before, before, "vllm:time_to_first_token_seconds", 0.5) is None  # nothing observed
    assert histogram_quantile({}, after, "vllm:inter_token_latency_seconds", 0.5) is None  # no such buckets


def test_the_servers_view_carries_its_quantiles_where_it_exports_buckets() -> None:
    view = llm_server_delta({"metrics": parse_metrics(BEFORE)}, {"metrics": parse_metrics(AFTER)})
    assert view is not None and view.quantiles == {}  # the snapshots' one bucket observed nothing over the run
    after = {**parse_metrics(AFTER), **buckets({"0.01": 26.0, "+Inf": 46.0})}
    before = {**parse_metrics(BEFORE), **buckets({"0.01": 6.0, "+Inf": 6.0})}
    view = llm_server_delta({"metrics": before}, {"metrics": after})
    assert view is not None and set(view.quantiles) == {"ttft_p50", "ttft_p99"}
    assert view.quantiles["ttft_p50"].ms == pytest.approx(10.0) and view.quantiles["ttft_p99"].high_ms is None
