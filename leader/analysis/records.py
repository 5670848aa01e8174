"""Raw per-request records: one compressed npz blob per point in GridFS bucket `records` (common.wire.records).

`leader/store/records.py` stores and loads them; this turns them into the latencies every view reads: the measured
requests only (warm-up excluded, as the point's own summary counts them), from their intended send time.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from common.wire.records import LLM_OFFSETS, LLM_TOKENS, OK, decode, measured_mask
from common.wire.results import PointResult
from leader.store.records import load_records

__all__ = ["LlmSeries", "decode", "load_records", "measured_latencies_ms", "measured_llm"]

# A series of per-request (or per-event) figures with the time each belongs to: (t ns, value).
Timed = tuple[np.ndarray, np.ndarray]


@dataclass(frozen=True)
class LlmSeries:
    """A language-model point's measured requests from its raw records, as compare resamples them: TTFT and TPOT per
    request and every inter-token gap (ms, each at its request's intended time), and the output tokens each answer
    carried at its end (for tokens/s over the window)."""

    ttft_ms: Timed
    tpot_ms: Timed
    itl_ms: Timed
    tokens: Timed
    window_s: float
    prompt_tokens: np.ndarray  # each TTFT's request's prompt, as the server counted it (-1: unknown)


def measured_latencies_ms(arrays: dict[str, np.ndarray], result: PointResult) -> tuple[np.ndarray, np.ndarray]:
    """(intended ns, latency ms) of every answered request of the point's measured window, from its intended time."""
    done = arrays["done_ns"].astype(np.int64)
    intended = arrays["intended_ns"].astype(np.int64)
    keep = measured_mask(arrays, warmup_s=result.point.warmup_s, measured_s=result.measured_s)
    if "status" in arrays:
        keep &= arrays["status"] == OK
    return intended[keep], (done[keep] - intended[keep]) / 1e6


def measured_llm(arrays: dict[str, np.ndarray], result: PointResult) -> LlmSeries | None:
    """The measured window's answered requests as LlmSeries (TTFT from the intended time, TPOT over the server's output
    token count, as the point's own figures define them); None for records without token events."""
    if LLM_TOKENS not in arrays or LLM_OFFSETS not in arrays or "llm_completion_tokens" not in arrays:
        return None
    events, offsets = arrays[LLM_TOKENS].astype(np.int64), arrays[LLM_OFFSETS].astype(np.int64)
    intended, done = arrays["intended_ns"].astype(np.int64), arrays["done_ns"].astype(np.int64)
    out_tokens = arrays["llm_completion_tokens"].astype(np.int64)
    keep = measured_mask(arrays, warmup_s=result.point.warmup_s, measured_s=result.measured_s)
    if "status" in arrays:
        keep &= arrays["status"] == OK
    prompts = arrays["llm_prompt_tokens"].astype(np.int64) if "llm_prompt_tokens" in arrays else np.full(len(intended), -1)
    held: list[int] = []
    ttft: list[tuple[int, float]] = []
    tpot: list[tuple[int, float]] = []
    gaps_t: list[np.ndarray] = []
    gaps: list[np.ndarray] = []
    for i in np.flatnonzero(keep & (offsets[1:] > offsets[:-1])):
        times = events[offsets[i] : offsets[i + 1]]
        ttft.append((int(intended[i]), (times[0] - intended[i]) / 1e6))
        held.append(int(prompts[i]))
        if out_tokens[i] > 1:
            tpot.append((int(intended[i]), (times[-1] - times[0]) / (out_tokens[i] - 1) / 1e6))
        if len(times) > 1:
            gaps.append(np.diff(times) / 1e6)
            gaps_t.append(np.full(len(times) - 1, intended[i]))

    def timed(pairs: list[tuple[int, float]]) -> Timed:
        return np.array([t for t, _ in pairs], dtype=np.int64), np.array([v for _, v in pairs], dtype=np.float64)

    itl = (np.concatenate(gaps_t), np.concatenate(gaps)) if gaps else (np.zeros(0, np.int64), np.zeros(0))
    answered = keep & (out_tokens > 0)
    tokens = (done[answered], out_tokens[answered].astype(np.float64))
    return LlmSeries(timed(ttft), timed(tpot), itl, tokens, result.measured_s, np.array(held, dtype=np.int64))
