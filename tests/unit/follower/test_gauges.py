"""An LLM server's gauges through a point (follower/point/gauges.py): read from each server's metrics under its own
names, read on a thread while the point runs, and averaged into the windows they fall in."""

from __future__ import annotations

import itertools
import time

import pytest

from common.wire.results import WindowStat
from follower.backends.llmserver import parse_metrics
from follower.backends.stats import llm_gauges
from follower.point.gauges import GaugeSampler, with_gauges

S = 1_000_000_000


def test_each_servers_gauges_are_read_under_its_own_names() -> None:
    vllm = parse_metrics(
        'vllm:num_requests_running{engine="0",model_name="m"} 3\nvllm:num_requests_waiting{engine="0",model_name="m"} 1\n'
        'vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.25\nvllm:prompt_tokens_total{model_name="m"} 9'
    )
    assert llm_gauges({"metrics": vllm}) == {"running": 3.0, "waiting": 1.0, "kv_cache_usage": 0.25}
    sglang = parse_metrics("sglang:num_running_reqs 2\nsglang:num_queue_reqs 0\nsglang:token_usage 0.5")
    assert llm_gauges({"metrics": sglang}) == {"running": 2.0, "waiting": 0.0, "kv_cache_usage": 0.5}
    # llama.cpp reports its slots in use and its deferred requests, not its KV cache: absent, never 0.
    llamacpp = parse_metrics("llamacpp:requests_processing 4\nllamacpp:requests_deferred 2\nllamacpp:n_decode_total 7")
    assert llm_gauges({"metrics": llamacpp}) == {"running": 4.0, "waiting": 2.0}
    assert llm_gauges({}) == {} and llm_gauges({"metrics": parse_metrics("vllm:prompt_tokens_total 1")}) == {}


def _window(t_s: float) -> WindowStat:
    return WindowStat(t_s=t_s, duration_s=1.0, requests=1, ok=1, throughput=1.0)


def test_each_window_gets_the_mean_of_the_reads_inside_it() -> None:
    origin = 100 * S
    readings = [
        (origin + S // 4, {"running": 2.0, "waiting": 0.0, "kv_cache_usage": 0.1}),
        (origin + 3 * S // 4, {"running": 4.0, "waiting": 2.0, "kv_cache_usage": 0.3}),
        (origin + S + S // 2, {"running": 8.0}),  # a read that gave only the batch
        (origin - S // 2, {"running": 99.0}),  # in the warm-up: no measured window holds it
    ]
    first, second, third = with_gauges([_window(0.0), _window(1.0), _window(2.0)], readings, origin)
    assert (first.server_running, first.server_waiting, first.kv_cache_usage) == (3.0, 1.0, pytest.approx(0.2))
    assert (second.server_running, second.server_waiting, second.kv_cache_usage) == (8.0, None, None)
    assert (third.server_running, third.server_waiting, third.kv_cache_usage) == (None, None, None)
    assert with_gauges([_window(0.0)], None, origin) == [_window(0.0)]


def test_the_sampler_reads_until_stopped_and_a_failed_read_leaves_a_hole() -> None:
    calls = itertools.count()

    def stats() -> dict[str, object]:
        n = next(calls)
        if n == 1:
            raise ConnectionError("the server did not answer")
        return {"metrics": {"vllm:num_requests_running": float(n)}}

    sampler = GaugeSampler(stats, interval_s=0.01).start()  # held to its floor of 0.25 s between reads
    deadline = time.monotonic() + 10
    while len(sampler.readings) < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    readings = sampler.stop()
    values = [g["running"] for _, g in readings]
    assert values[:2] == [0.0, 2.0]  # read 1 failed: no reading for it
    assert all(a[0] < b[0] for a, b in zip(readings, readings[1:], strict=False))
    assert not sampler._thread.is_alive()  # stopped means stopped
