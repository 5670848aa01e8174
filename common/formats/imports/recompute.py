"""Benchfleet's own figures from another tool's per-request records, with benchfleet's definitions, and how far each
of the tool's figures moves under them.

Benchfleet counts latency and TTFT from the intended send (a request the client sent late still waited); a record
that says when it was due (GuideLLM's targeted start, AIPerf's credit issue, vLLM's arrival before its semaphore) is
counted from then. ITL is every gap between token events pooled over requests, and TPOT each request's
(last token - first) / (output tokens - 1). Quantiles are numpy's linear ones, as common.stats uses for raw series."""

from __future__ import annotations

import numpy as np

from common.formats.imports.model import Level
from common.wire.imports import Recomputed


def _q(values: list[float], q: float) -> float | None:
    return float(np.percentile(np.asarray(values), q)) if values else None


def recompute(level: Level, due_by: str | None) -> Recomputed | None:
    """Benchfleet's figures from the level's answered records (`due_by`: what the tool's due time is, for the
    record); None without records that time every request."""
    answered = [r for r in level.records if r.ok and r.latency_ms is not None]
    if not answered:
        return None
    from_intended = all(r.due_s is not None and r.sent_s is not None for r in answered)
    late = [
        1e3 * (r.sent_s - r.due_s) if from_intended and r.sent_s is not None and r.due_s is not None else 0.0 for r in answered
    ]
    latency = [w + (r.latency_ms or 0.0) for w, r in zip(late, answered, strict=True)]
    ttft = [w + r.ttft_ms for w, r in zip(late, answered, strict=True) if r.ttft_ms is not None]
    itl = [g for r in answered for g in r.itl_ms]
    tpot = [sum(r.itl_ms) / len(r.itl_ms) for r in answered if r.itl_ms]
    ours = {
        "latency_p50_ms": _q(latency, 50),
        "latency_p99_ms": _q(latency, 99),
        "ttft_p50_ms": _q(ttft, 50),
        "ttft_p99_ms": _q(ttft, 99),
        "itl_p50_ms": _q(itl, 50),
        "itl_p99_ms": _q(itl, 99),
        "tpot_p50_ms": _q(tpot, 50),
        "tpot_p99_ms": _q(tpot, 99),
    }
    shift = {}
    for key, value in ours.items():
        figure, q = key.split("_")[0], key.split("_")[1]
        theirs = (getattr(level, figure) or {}).get(q)
        if value is not None and theirs:
            shift[key] = (value - theirs) / theirs
    latency_p50, latency_p99 = ours.pop("latency_p50_ms"), ours.pop("latency_p99_ms")
    assert latency_p50 is not None and latency_p99 is not None  # answered is not empty
    return Recomputed(
        requests=len(answered),
        counted_from=f"the due time: {due_by}" if from_intended and due_by else "the send (the records say no due time)",
        latency_p50_ms=latency_p50,
        latency_p99_ms=latency_p99,
        **ours,
        shift=shift,
    )
