"""Seeded arrival schedules, precomputed before the run so sending never waits on arithmetic."""

from __future__ import annotations

from typing import Literal

import numpy as np

Pattern = Literal["poisson", "constant"]


def arrival_offsets_ns(pattern: Pattern, rate: float, duration_s: float, seed: int) -> np.ndarray:
    """Intended send times (int64 ns from the run's start) of every request in [0, duration_s); same seed, same offsets."""
    if not rate > 0:
        raise ValueError(f"rate must be > 0, got {rate}")
    if not duration_s > 0:
        raise ValueError(f"duration_s must be > 0, got {duration_s}")
    end_ns = int(round(duration_s * 1e9))
    expected = rate * duration_s
    if pattern == "constant":
        n = int(np.ceil(expected))
        offsets = np.round(np.arange(n, dtype=np.float64) * (1e9 / rate)).astype(np.int64)
        return offsets[offsets < end_ns]
    if pattern == "poisson":
        rng = np.random.default_rng(seed)
        # Draw comfortably more gaps than needed (mean + 10 sigma + slack) and cut at the end: one draw, no loop
        # in the common case; the loop only guards against a freak shortfall.
        n = int(expected + 10.0 * np.sqrt(expected) + 16)
        times = np.cumsum(rng.exponential(1e9 / rate, size=n))
        while times[-1] < end_ns:
            times = np.concatenate([times, times[-1] + np.cumsum(rng.exponential(1e9 / rate, size=n))])
        offsets = np.floor(times).astype(np.int64)
        return offsets[offsets < end_ns]
    raise ValueError(f"unknown arrival pattern {pattern!r}; known: constant, poisson")
