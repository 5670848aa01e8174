"""The scheduler bench's estimates (bench/scheduler.py, part 1d): how far a job's duration estimate is from what it
took, from its spec alone and from the leader's learned correction (leader/store/durations.py: fixed cost + rate x
load seconds, fitted on the finished jobs of the same kind), on synthetic kinds of job whose true costs differ."""

from __future__ import annotations

import random
import statistics

from common.spec.grid import START_COST_S
from leader.store.durations import fit, fold

# Load seconds of a job (points x (warm-up + duration)): a grid of 1-16 points of 10 s to 10 min.
SIZES_S = (10.0, 30.0, 60.0, 120.0, 300.0, 600.0)


def estimate_figures(kinds: int = 20, seed: int = 1, learn: int = 20, judge: int = 20) -> dict[str, float]:
    """Per kind, a true fixed cost (model fetch, server start, cold start: 3-60 s) and rate (drains, warm-ups and
    per-point starts the spec does not count: 1.0-1.6x), each run off by ~5%. After `learn` finished jobs of a kind,
    the relative error of the next `judge` estimates, from the spec and from the fit, and how many actuals fall within
    the fit's estimate +- 2 spreads."""
    rng = random.Random(seed)
    spec_err: list[float] = []
    fit_err: list[float] = []
    covered = 0
    for _ in range(kinds):
        overhead, rate, backends = rng.uniform(3.0, 60.0), rng.uniform(1.0, 1.6), rng.choice((1, 2))
        sums: dict[str, float] | None = None
        for n in range(learn + judge):
            measured = rng.choice(SIZES_S) * rng.choice((1, 2, 4, 16))
            actual = (overhead + rate * measured) * rng.lognormvariate(0.0, 0.05)
            spec = START_COST_S * backends + measured
            if n >= learn and sums is not None:
                correction = fit(sums)
                estimate = correction.estimate(spec, measured)
                spec_err.append(abs(spec - actual) / actual)
                fit_err.append(abs(estimate - actual) / actual)
                covered += abs(estimate - actual) <= 2 * (correction.spread_s or 0.0)
            sums = fold(sums, measured_s=measured, actual_s=actual)
    return {
        "spec_median_err": statistics.median(spec_err),
        "learned_median_err": statistics.median(fit_err),
        "learned_p90_err": sorted(fit_err)[int(0.9 * len(fit_err))],
        "within_2_spreads": covered / len(fit_err),
    }
