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
        # A Poisson process conditioned on its count: exactly round(rate × duration) arrivals, placed as sorted
        # uniform times (the order statistics of a Poisson process given N). The gaps stay exponential-like and
        # bursty, but the offered rate is the target itself, so "achieved within 2% of the target" measures the
        # generator and the server rather than the luck of one draw (±4% at 600 requests unconditioned).
        n = int(round(expected))
        offsets = np.sort(np.floor(rng.uniform(0.0, end_ns, size=n))).astype(np.int64)
        return offsets
    raise ValueError(f"unknown arrival pattern {pattern!r}; known: constant, poisson")
