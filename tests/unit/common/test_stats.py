"""The block-bootstrap confidence interval of a latency quantile: right on independent samples, honest on bursts."""

from __future__ import annotations

import numpy as np
import pytest

from common.stats import block_bootstrap_ci, block_bootstrap_diff_ci

RATE = 500  # requests per second
DURATION_S = 10


def _times(rng: np.random.Generator) -> np.ndarray:
    """Poisson intended times (ns) over the run."""
    gaps = rng.exponential(1e9 / RATE, RATE * DURATION_S)
    return np.cumsum(gaps).astype(np.int64)


def _bursty(rng: np.random.Generator, t_ns: np.ndarray) -> np.ndarray:
    """Latencies (ms) of a server that stalls now and then: every request in a stall is slow together.

    A few 50 ms stalls per run at random times: the p99 depends on how many stalls a run happened to have, so its
    run-to-run spread is far wider than independent samples would suggest.
    """
    base = rng.lognormal(np.log(2.0), 0.2, len(t_ns))
    stalls = rng.uniform(0, DURATION_S * 1e9, rng.poisson(4))
    for start in stalls:
        inside = (t_ns >= start) & (t_ns < start + 50e6)
        base[inside] += (start + 50e6 - t_ns[inside]) / 1e6 + 20.0
    return base


def _iid_ci(values: np.ndarray, q: float, rng: np.random.Generator) -> tuple[float, float]:
    """The interval that treats requests as independent: resample single requests."""
    draws = [np.quantile(rng.choice(values, len(values)), q) for _ in range(300)]
    lo, hi = np.quantile(draws, [0.025, 0.975])
    return float(lo), float(hi)


def test_independent_samples_get_an_interval_around_the_quantile() -> None:
    rng = np.random.default_rng(1)
    t = _times(rng)
    values = rng.exponential(2.0, len(t))
    (p50_lo, p50_hi), (p99_lo, p99_hi) = block_bootstrap_ci(t, values, (0.50, 0.99))  # type: ignore[misc]
    assert p50_lo < np.quantile(values, 0.50) < p50_hi
    assert p99_lo < np.quantile(values, 0.99) < p99_hi
    # True quantiles of Exp(mean 2): 2 ln 2 and 2 ln 100; 5,000 samples pin them to a few per cent.
    assert p50_lo < 2 * np.log(2) < p50_hi and p99_lo < 2 * np.log(100) < p99_hi
    assert (p50_hi - p50_lo) / np.quantile(values, 0.5) < 0.15
    # With no bursts, blocks and single requests agree on the width (within the bootstrap's own noise).
    iid = _iid_ci(values, 0.99, rng)
    assert 0.6 < (p99_hi - p99_lo) / (iid[1] - iid[0]) < 1.6


def test_bursts_widen_the_interval_and_it_keeps_its_coverage() -> None:
    """Over many simulated runs the 95% block interval covers the true p99 far more often than the naive one."""
    rng = np.random.default_rng(7)
    truth = np.quantile(np.concatenate([_bursty(rng, t) for t in (_times(rng) for _ in range(200))]), 0.99)
    covered_block = covered_iid = 0
    width_ratio = []
    runs = 40
    for seed in range(runs):
        run_rng = np.random.default_rng(100 + seed)
        t = _times(run_rng)
        values = _bursty(run_rng, t)
        bounds = block_bootstrap_ci(t, values, (0.99,), seed=seed)
        assert bounds is not None
        lo, hi = bounds[0]
        ilo, ihi = _iid_ci(values, 0.99, run_rng)
        covered_block += lo <= truth <= hi
        covered_iid += ilo <= truth <= ihi
        width_ratio.append((hi - lo) / max(ihi - ilo, 1e-9))
    assert covered_block / runs >= 0.80, f"block bootstrap covered the true p99 in {covered_block}/{runs} runs"
    # Measured at these seeds: 38/40 against 19/40, and the block interval 4x as wide.
    assert covered_block >= covered_iid + 8, (covered_block, covered_iid)
    assert np.median(width_ratio) > 2


def test_deterministic_for_a_seed_and_none_when_nothing_to_resample() -> None:
    rng = np.random.default_rng(3)
    t = _times(rng)
    values = rng.exponential(1.0, len(t))
    assert block_bootstrap_ci(t, values, (0.99,), seed=5) == block_bootstrap_ci(t, values, (0.99,), seed=5)
    assert block_bootstrap_ci(t[:1], values[:1], (0.5,)) is None
    one_block = np.arange(100, dtype=np.int64) * 1000  # 100 requests within 0.1 ms: a single block
    assert block_bootstrap_ci(one_block, values[:100], (0.5,)) is None


@pytest.mark.parametrize("n", [3, 50, 4000])
def test_bounds_are_samples_in_order(n: int) -> None:
    rng = np.random.default_rng(n)
    t = np.sort(rng.integers(0, 5 * 10**9, n))
    values = rng.lognormal(0, 1, n)
    bounds = block_bootstrap_ci(t, values, (0.5, 0.99))
    assert bounds is not None
    for lo, hi in bounds:
        assert lo <= hi and lo in values and hi in values


def test_two_runs_of_one_bursty_server_are_rarely_called_different() -> None:
    """The p99 difference of two runs of the same server: its 95% interval should exclude 0 about 5% of the time.

    Resampling single requests excludes it far more often (a false regression whenever one run had an extra
    stall); blocks keep the false alarms near the nominal rate.
    """
    pairs = 30
    false_block = false_iid = 0
    for seed in range(pairs):
        rng = np.random.default_rng(500 + seed)
        ta, tb = _times(rng), _times(rng)
        va, vb = _bursty(rng, ta), _bursty(rng, tb)
        ci = block_bootstrap_diff_ci((ta, va), (tb, vb), 0.99, seed=seed)
        assert ci is not None
        false_block += not ci[0] <= 0 <= ci[1]
        draws = [np.quantile(rng.choice(vb, len(vb)), 0.99) - np.quantile(rng.choice(va, len(va)), 0.99)
                 for _ in range(200)]  # fmt: skip
        lo, hi = np.quantile(draws, [0.025, 0.975])
        false_iid += not lo <= 0 <= hi
    # Measured at these seeds: blocks 1/30, single requests 21/30.
    assert false_block <= 5, f"block bootstrap called {false_block}/{pairs} same-server pairs different"
    assert false_iid >= false_block + 10, (false_iid, false_block)
    assert block_bootstrap_diff_ci((ta[:1], va[:1]), (tb, vb), 0.99) is None


def test_a_real_slow_down_of_a_steady_server_is_found() -> None:
    """Without bursts the interval is tight: a 15% slower p99 is found in (nearly) every pair, none of the same."""
    found = false = 0
    for seed in range(20):
        rng = np.random.default_rng(900 + seed)
        ta, tb = _times(rng), _times(rng)
        va, vb = rng.lognormal(np.log(2.0), 0.35, len(ta)), rng.lognormal(np.log(2.0), 0.35, len(tb))
        slower = block_bootstrap_diff_ci((ta, va), (tb, vb * 1.15), 0.99, seed=seed)
        same = block_bootstrap_diff_ci((ta, va), (tb, vb), 0.99, seed=seed)
        assert slower is not None and same is not None
        found += slower[0] > 0
        false += not same[0] <= 0 <= same[1]
    assert found >= 17 and false <= 3, (found, false)  # measured: 20/20 found, 0/20 false


def test_the_wilson_interval_holds_its_share_at_the_ends_and_matches_the_formula() -> None:
    from common.stats import wilson_interval

    for trials in (1, 7, 459, 600, 10_000):  # every trial a success, or none: the share itself is inside, to the bit
        low, high = wilson_interval(trials, trials)  # type: ignore[misc]
        assert low < 1.0 and high == 1.0
        low, high = wilson_interval(0, trials)  # type: ignore[misc]
        assert low == 0.0 < high
    low, high = wilson_interval(90, 100)  # type: ignore[misc]
    assert (round(low, 4), round(high, 4)) == (0.8256, 0.9448)  # Wilson's score interval at 95%, by hand
    assert wilson_interval(0, 0) is None
