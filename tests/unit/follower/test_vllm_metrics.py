"""vLLM's own metrics: its Prometheus text parsed, and the server's view of a point from two snapshots (histogram
means over the run, counters' increase), whatever the labels."""

from __future__ import annotations

import pytest

from follower.backends.stats import llm_server_delta
from follower.backends.vllm import parse_metrics

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
    assert view.prefix_cache_hit_share == pytest.approx(0.25) and view.kv_cache_usage == 0.25
    assert view.queue_ms_mean is None  # a histogram this server did not export
    assert llm_server_delta({}, {"metrics": parse_metrics(AFTER)}) is None
    assert llm_server_delta({"model_stats": []}, {"model_stats": []}) is None
