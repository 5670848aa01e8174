"""Arrival schedules: reproducible, correctly distributed, monotonic."""

from __future__ import annotations

import numpy as np
import pytest

from follower.loadgen.schedule import arrival_offsets_ns


def test_same_seed_same_offsets_and_different_seeds_differ() -> None:
    a = arrival_offsets_ns("poisson", 300.0, 5.0, seed=7)
    b = arrival_offsets_ns("poisson", 300.0, 5.0, seed=7)
    c = arrival_offsets_ns("poisson", 300.0, 5.0, seed=8)
    assert a.dtype == np.int64
    np.testing.assert_array_equal(a, b)
    assert len(a) != len(c) or not np.array_equal(a, c)


@pytest.mark.parametrize("pattern", ["poisson", "constant"])
def test_offsets_monotonic_and_inside_the_duration(pattern: str) -> None:
    offsets = arrival_offsets_ns(pattern, 1000.0, 3.0, seed=1)  # type: ignore[arg-type]
    assert offsets[0] >= 0
    assert offsets[-1] < 3_000_000_000
    assert np.all(np.diff(offsets) >= 0)


def test_poisson_mean_rate_and_exponential_gaps() -> None:
    rate, duration = 2000.0, 50.0  # 100k arrivals: the mean is within ~0.3% (1 sigma)
    offsets = arrival_offsets_ns("poisson", rate, duration, seed=3)
    assert len(offsets) / duration == pytest.approx(rate, rel=0.02)
    gaps = np.diff(offsets).astype(np.float64)
    assert gaps.mean() == pytest.approx(1e9 / rate, rel=0.02)
    # Exponential gaps have a coefficient of variation of 1.
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, abs=0.03)


def test_constant_spacing_is_exact() -> None:
    offsets = arrival_offsets_ns("constant", 250.0, 2.0, seed=0)
    assert len(offsets) == 500
    assert offsets[0] == 0
    np.testing.assert_array_equal(np.diff(offsets), 4_000_000)


def test_constant_non_integer_period_does_not_drift() -> None:
    offsets = arrival_offsets_ns("constant", 3.0, 10.0, seed=0)
    assert len(offsets) == 30
    # i / rate rounded per request: no accumulated error.
    assert offsets[-1] == round(29 * 1e9 / 3)


@pytest.mark.parametrize(("pattern", "rate", "duration"), [("gamma", 1.0, 1.0), ("poisson", 0.0, 1.0), ("constant", 1.0, 0.0)])
def test_bad_arguments_are_refused(pattern: str, rate: float, duration: float) -> None:
    with pytest.raises(ValueError):
        arrival_offsets_ns(pattern, rate, duration, seed=0)  # type: ignore[arg-type]


@pytest.mark.parametrize(("rate", "duration"), [(200.0, 3.0), (200.0, 10.0), (37.5, 4.0), (5000.0, 1.0)])
def test_poisson_offers_exactly_the_target_count(rate: float, duration: float) -> None:
    # Conditioned on its count, so the offered rate is the target for every seed, not just on average.
    for seed in range(5):
        assert len(arrival_offsets_ns("poisson", rate, duration, seed=seed)) == round(rate * duration)


def test_poisson_gaps_pass_a_kolmogorov_smirnov_test_against_the_exponential() -> None:
    rate = 500.0
    gaps = np.diff(arrival_offsets_ns("poisson", rate, 20.0, seed=11)).astype(np.float64) / 1e9
    gaps.sort()
    cdf = 1.0 - np.exp(-rate * gaps)
    n = len(gaps)
    d = max(np.max(np.arange(1, n + 1) / n - cdf), np.max(cdf - np.arange(n) / n))
    assert d < 1.63 / np.sqrt(n), f"KS distance {d:.4f} rejects exponential gaps at the 1% level"
