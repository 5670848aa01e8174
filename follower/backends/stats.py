"""A point's server-side counters: the difference of two `Backend.stats()` snapshots, in one shape for every server."""

from __future__ import annotations

import math
from typing import Any

from common.wire.results import LlmServerView, ServerQuantile, ServerStats


def _counters(stats: dict[str, Any]) -> dict[str, float] | None:
    """Cumulative (inferences, executions, queue ns, compute ns) from Triton's or benchfleet's own stats document."""
    model_stats = stats.get("model_stats")
    if isinstance(model_stats, list) and model_stats:
        # Triton: /v2/models/NAME/stats; queue and compute_infer are summed over requests (ns).
        first = model_stats[0]
        inference = first.get("inference_stats", {})
        # benchfleet's python model counts its processors' time in custom metrics (compute_infer includes it too).
        metrics = stats.get("metrics") or {}
        return {
            "inferences": float(first.get("inference_count", 0)),
            "executions": float(first.get("execution_count", 0)),
            "queue_ns": float(inference.get("queue", {}).get("ns", 0)),
            "compute_ns": float(inference.get("compute_infer", {}).get("ns", 0)),
            "preprocess_ns": float(metrics.get("benchfleet_preprocess_ns_total", -1)),
            "postprocess_ns": float(metrics.get("benchfleet_postprocess_ns_total", -1)),
        }
    if "executions" in stats:
        # benchfleet's own servers (follower.servers.kserve_http).
        return {
            "inferences": float(stats.get("ok", 0)),
            "executions": float(stats.get("executions", 0)),
            "queue_ns": float(stats.get("queue_ns", 0)),
            "compute_ns": float(stats.get("infer_ns", 0)),
            "preprocess_ns": float(stats.get("preprocess_ns", -1)),
            "postprocess_ns": float(stats.get("postprocess_ns", -1)),
        }
    return None


def server_stats_delta(before: dict[str, Any], after: dict[str, Any]) -> ServerStats | None:
    """What the server counted between two snapshots; None when it keeps no such counters or was not reachable."""
    a, b = _counters(before), _counters(after)
    if a is None or b is None:
        return None
    d = {k: b[k] - a[k] for k in a}

    def processing_ms(stage: str) -> float | None:
        # -1 marks a server that runs no such processor (or whose counter was unreadable in a snapshot).
        return d[stage] / n / 1e6 if n and a[stage] >= 0 and b[stage] >= 0 else None

    n, runs = int(d["inferences"]), int(d["executions"])
    if n < 0 or runs < 0:
        return None  # the server restarted between the snapshots: its counters began again
    return ServerStats(
        inferences=n,
        executions=runs,
        mean_batch=n / runs if runs else None,
        queue_ms_mean=d["queue_ns"] / n / 1e6 if n else None,
        compute_ms_mean=d["compute_ns"] / n / 1e6 if n else None,
        preprocess_ms_mean=processing_ms("preprocess_ns"),
        postprocess_ms_mean=processing_ms("postprocess_ns"),
    )


# The server's histograms (seconds) whose mean over the run the view reports: field <- metric names, the first the
# server has (names moved between vLLM versions; SGLang's are its own).
_LLM_HISTOGRAMS = {
    "ttft_ms_mean": ("vllm:time_to_first_token_seconds", "sglang:time_to_first_token_seconds"),
    "itl_ms_mean": (
        "vllm:inter_token_latency_seconds",
        "vllm:time_per_output_token_seconds",
        "sglang:inter_token_latency_seconds",
        "sglang:time_per_output_token_seconds",
    ),
    "e2e_ms_mean": ("vllm:e2e_request_latency_seconds", "sglang:e2e_request_latency_seconds"),
    "queue_ms_mean": ("vllm:request_queue_time_seconds", "sglang:queue_time_seconds"),
    "prefill_ms_mean": ("vllm:request_prefill_time_seconds",),
    "decode_ms_mean": ("vllm:request_decode_time_seconds",),
}
# Counters (their increase over the run) and gauges (their value at its end): field <- names, the first present.
_LLM_COUNTERS = {
    "requests": ("vllm:request_success_total", "sglang:num_requests_total"),  # llama.cpp counts none
    "prompt_tokens": ("vllm:prompt_tokens_total", "sglang:prompt_tokens_total", "llamacpp:prompt_tokens_total"),
    "generation_tokens": ("vllm:generation_tokens_total", "sglang:generation_tokens_total", "llamacpp:tokens_predicted_total"),
    "preemptions": ("vllm:num_preemptions_total", "sglang:num_retracted_requests_total"),
}
# llama.cpp's prompt tokens its slots' caches held (its prefix-cache hits); its prompt_tokens_total counts the others.
_LLAMACPP_CACHED = "llamacpp:prompt_tokens_cached_total"
_KV_USAGE = ("vllm:kv_cache_usage_perc", "sglang:token_usage")
# Gauges read once per window through a point (follower/point/gauges.py): field <- names, the first present.
_LLM_GAUGES = {
    "running": ("vllm:num_requests_running", "sglang:num_running_reqs", "llamacpp:requests_processing"),
    "waiting": ("vllm:num_requests_waiting", "sglang:num_queue_reqs", "llamacpp:requests_deferred"),
    "kv_cache_usage": _KV_USAGE,  # a share, 0..1
}


def _total(metrics: dict[str, float], name: str) -> float:
    """A counter summed over its label sets (vllm:request_success_total{finished_reason=...})."""
    return sum(v for k, v in metrics.items() if k == name or k.startswith(name + "{"))


def llm_gauges(stats: dict[str, Any]) -> dict[str, float]:
    """An LLM server's gauges in one snapshot of its metrics (its backend's stats()): `running` (its batch), `waiting`
    and `kv_cache_usage` (0..1), those it reports, each summed over its label sets."""
    metrics = stats.get("metrics")
    if not isinstance(metrics, dict):
        return {}
    out: dict[str, float] = {}
    for field, names in _LLM_GAUGES.items():
        name = next((n for n in names if any(k == n or k.startswith(n + "{") for k in metrics)), None)
        if name is not None:
            out[field] = _total(metrics, name)
    return out


def histogram_quantile(before: dict[str, float], after: dict[str, float], name: str, q: float) -> ServerQuantile | None:
    """Quantile q (0..1), in ms, of what a seconds histogram observed between two snapshots of its buckets
    (`NAME_bucket{le="..."}`, cumulative); None where it has no buckets or observed nothing."""
    prefix = f'{name}_bucket{{le="'
    edges = sorted((float(k[len(prefix) : -2]), k) for k in after if k.startswith(prefix) and k.endswith('"}'))
    if not edges:
        return None
    cumulative = [(le, after[k] - before.get(k, 0.0)) for le, k in edges]
    total = cumulative[-1][1]
    if total <= 0:
        return None
    rank = q * total
    low, below = 0.0, 0.0
    for le, count in cumulative:
        if count >= rank and count > below:
            if math.isinf(le):
                return ServerQuantile(ms=1e3 * low, low_ms=1e3 * low, high_ms=None)
            share = (rank - below) / (count - below)
            return ServerQuantile(ms=1e3 * (low + (le - low) * share), low_ms=1e3 * low, high_ms=1e3 * le)
        low, below = le, count
    return None


def llm_server_delta(before: dict[str, Any], after: dict[str, Any]) -> LlmServerView | None:
    """What an LLM server measured between two snapshots of its metrics (its backend's stats()); None without them."""
    a, b = before.get("metrics"), after.get("metrics")
    if not isinstance(a, dict) or not isinstance(b, dict):
        return None
    keys = "".join(b)
    counted = {field: next((n for n in names if n in keys), None) for field, names in _LLM_COUNTERS.items()}
    if counted["requests"] is None and counted["prompt_tokens"] is None:
        return None

    def delta(name: str | None) -> float:
        return _total(b, name) - _total(a, name) if name else 0.0

    means: dict[str, float | None] = {}
    quantiles: dict[str, ServerQuantile] = {}
    for field, names in _LLM_HISTOGRAMS.items():
        name = next((n for n in names if f"{n}_count" in b), None)
        count = delta(f"{name}_count") if name else 0.0
        means[field] = 1e3 * delta(f"{name}_sum") / count if name and count > 0 else None
        if name and field in ("ttft_ms_mean", "itl_ms_mean"):
            for q in (50, 99):
                found = histogram_quantile(a, b, name, q / 100)
                if found is not None:
                    quantiles[f"{field.split('_')[0]}_p{q}"] = found
    queries = delta("vllm:prefix_cache_queries_total")
    hit_share = delta("vllm:prefix_cache_hits_total") / queries if queries > 0 else b.get("sglang:cache_hit_rate")
    prompt_tokens = delta(counted["prompt_tokens"])
    if _LLAMACPP_CACHED in b:  # llama.cpp: the prompts' tokens are those it computed and those its caches held
        cached = delta(_LLAMACPP_CACHED)
        prompt_tokens += cached
        hit_share = cached / prompt_tokens if prompt_tokens > 0 else None
    usage = next((b[n] for n in _KV_USAGE if n in b), None)
    counts = {
        "requests": int(delta(counted["requests"])) if counted["requests"] else None,
        "prompt_tokens": int(prompt_tokens),
        "generation_tokens": int(delta(counted["generation_tokens"])),
        "preemptions": int(delta(counted["preemptions"])),
    }
    return LlmServerView.model_validate(
        counts
        | means
        | {
            "prefix_cache_hit_share": float(hit_share) if hit_share is not None else None,
            "kv_cache_usage": float(usage) if usage is not None else None,
            "quantiles": quantiles,
        }
    )
