"""Shared maths: percentiles (one estimator, stated once), HDR histograms of nanosecond samples, bootstrap intervals.

Every percentile benchfleet reports is the **nearest rank**: the q-quantile of n samples is the ⌈q·n⌉-th smallest
(Hyndman and Fan's type 1, numpy's method="inverted_cdf"). It is always a value that was observed, and in a sparse tail
it is the higher of the two samples an interpolating estimator would blend: of 360 latencies the p99 is the 357th
(numpy's default reads 0.36 of the way from the 356th to the 357th; HdrHistogram's rank rounds to the 356th). A point's
figures come from its raw samples; where only histograms exist (a search's pooled repeat) the same rank is read from
the histogram, whose buckets hold 3 significant digits (its value is the bucket's top: at most 0.1% above the sample).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import numpy as np
from hdrh.histogram import HdrHistogram

from common.wire.results import Percentiles

# 1 ns to 10 minutes at 3 significant digits: the resolution MEASUREMENT.md asks for.
HIST_LOWEST_NS = 1
HIST_HIGHEST_NS = 600 * 10**9
HIST_DIGITS = 3


ESTIMATOR = "nearest rank: the q-quantile of n samples is the ⌈q·n⌉-th smallest"
QUANTILES = {"p50": 0.50, "p90": 0.90, "p95": 0.95, "p99": 0.99, "p999": 0.999}


def rank(q: float, n: int) -> int:
    """The 1-based rank of the q-quantile of n samples: ⌈q·n⌉, at least 1 (q·n rounded first, so 0.99 x 1000 is 990)."""
    return min(n, max(1, math.ceil(round(q * n, 9))))


def quantiles(values: np.ndarray, qs: Sequence[float] | np.ndarray) -> np.ndarray:
    """The nearest-rank quantiles `qs` (0..1) of `values` (one sort for all); raises on an empty array."""
    if not len(values):
        raise ValueError("quantiles of no samples")
    ordered = np.sort(np.asarray(values))
    return ordered[[rank(q, len(ordered)) - 1 for q in qs]]


def quantile(values: np.ndarray, q: float) -> float:
    """The nearest-rank q-quantile (0..1) of `values`: the ⌈q·n⌉-th smallest."""
    return float(quantiles(values, (q,))[0])


def new_histogram() -> HdrHistogram:
    """An empty histogram with benchfleet's fixed range, so any two can be merged."""
    return HdrHistogram(HIST_LOWEST_NS, HIST_HIGHEST_NS, HIST_DIGITS)


def histogram_of(values_ns: Iterable[int]) -> HdrHistogram:
    """Record nanosecond samples (clamped into the histogram's range)."""
    hist = new_histogram()
    for value in values_ns:
        hist.record_value(min(max(int(value), HIST_LOWEST_NS), HIST_HIGHEST_NS))
    return hist


def _value_at_rank(hist: HdrHistogram, at: int) -> int:
    """The histogram's value at a 1-based rank: the top of the bucket where the count reaches it."""
    total = 0
    for item in hist.get_recorded_iterator():
        total += item.count_added_in_this_iter_step
        if total >= at:
            return int(hist.get_highest_equivalent_value(item.value_iterated_to))
    return int(hist.get_max_value())


def summarize(hist: HdrHistogram) -> Percentiles | None:
    """Percentiles in milliseconds of a histogram (nearest rank, to its 3 significant digits), or None if it is empty.
    Where the samples themselves are at hand, summarize_ns reads them exactly."""
    count = hist.get_total_count()
    if count == 0:
        return None
    ms = 1e-6
    at = {name: _value_at_rank(hist, rank(q, count)) * ms for name, q in QUANTILES.items()}
    return Percentiles(count=count, mean=hist.get_mean_value() * ms, **at, max=hist.get_max_value() * ms)


def summarize_ns(values_ns: np.ndarray) -> Percentiles | None:
    """Percentiles in milliseconds of nanosecond samples, exact: the nearest-rank order statistics, the mean and the
    largest of the samples themselves; None for no samples."""
    if not len(values_ns):
        return None
    ordered = np.sort(np.asarray(values_ns, dtype=np.int64))
    ms = 1e-6
    at = {name: float(ordered[rank(q, len(ordered)) - 1]) * ms for name, q in QUANTILES.items()}
    return Percentiles(count=len(ordered), mean=float(ordered.mean()) * ms, **at, max=float(ordered[-1]) * ms)


def encode(hist: HdrHistogram) -> str:
    """The histogram as HdrHistogram's standard compressed base64 text (portable across HDR implementations)."""
    return hist.encode().decode("ascii")


def decode(text: str) -> HdrHistogram:
    """A histogram from `encode`'s text, re-recorded into benchfleet's fixed range so it merges with any other."""
    decoded = HdrHistogram.decode(text.encode("ascii"))
    hist = new_histogram()
    hist.add(decoded)
    return hist


def merge(encoded: Iterable[str | HdrHistogram]) -> HdrHistogram:
    """Exact sum of histograms (several generator processes, several followers): counts add bucket by bucket."""
    total = new_histogram()
    for item in encoded:
        total.add(decode(item) if isinstance(item, str) else item)
    return total


BLOCK_NS = 100_000_000  # 0.1 s: longer than a GC pause or a steal burst, short enough for hundreds of blocks
MAX_BLOCKS = 500  # longer runs get longer blocks: the resampling's cost stays bounded
BOOTSTRAP_DRAWS = 1000
BOOTSTRAP_BINS = 2000  # equal-count bins: 0.05% of the samples each, finer than any CI this gives


def _block_quantile_draws(t_ns: np.ndarray, values: np.ndarray, qs: Sequence[float], seed: int) -> np.ndarray | None:
    """BOOTSTRAP_DRAWS block-bootstrap replicates of each quantile in `qs`: shape (len(qs), draws); None if too few.

    The run is cut into stretches of BLOCK_NS by `t_ns` (intended time) and whole stretches are resampled with
    replacement, which keeps each burst together. Each draw is a weighted sum of per-block histograms over
    equal-count bins, so the cost is one matrix product whatever the sample count; a quantile lands on the largest
    sample of its bin (a real sample, within 1/BOOTSTRAP_BINS of the exact rank).
    """
    n = len(values)
    if n < 2 or len(t_ns) != n:
        return None
    t0 = int(t_ns.min())
    block_ns = max(BLOCK_NS, (int(t_ns.max()) - t0) // MAX_BLOCKS + 1)
    _, block = np.unique((t_ns - t0) // block_ns, return_inverse=True)
    n_blocks = int(block.max()) + 1
    if n_blocks < 2:
        return None
    order = np.argsort(values, kind="stable")
    # Bin b holds ranks [cut[b], cut[b+1]); its value is its largest sample.
    cut = np.unique(np.linspace(0, n, min(BOOTSTRAP_BINS, n) + 1).astype(np.int64))
    upper = values[order[cut[1:] - 1]]
    bin_of = np.empty(n, dtype=np.int64)
    bin_of[order] = np.searchsorted(cut, np.arange(n), side="right") - 1
    counts = np.zeros((n_blocks, len(upper)))
    np.add.at(counts, (block, bin_of), 1.0)
    rng = np.random.default_rng(seed)
    weights = rng.multinomial(n_blocks, np.full(n_blocks, 1.0 / n_blocks), size=BOOTSTRAP_DRAWS)
    cumulative = np.cumsum(weights @ counts, axis=1)
    out = np.empty((len(qs), BOOTSTRAP_DRAWS))
    for i, q in enumerate(qs):
        at = (cumulative < q * cumulative[:, -1:]).sum(axis=1)
        out[i] = upper[np.minimum(at, len(upper) - 1)]
    return out


def block_bootstrap_ci(
    t_ns: np.ndarray, values: np.ndarray, qs: Sequence[float], confidence: float = 0.95, seed: int = 0
) -> list[tuple[float, float]] | None:
    """Confidence intervals of the quantiles `qs` (0..1) of `values` by a block bootstrap over time `t_ns`.

    Slow answers come in bursts: a stall, a steal burst or a GC pause delays every request behind it, so requests
    are not independent and an interval that resamples single requests (or the binomial order-statistics bound)
    comes out too narrow. Deterministic for a given seed; None when there are too few samples or fewer than two
    0.1 s stretches to resample.
    """
    draws = _block_quantile_draws(t_ns, values, qs, seed)
    if draws is None:
        return None
    tail = (1 - confidence) / 2
    return [(float(lo), float(hi)) for lo, hi in np.quantile(draws, [tail, 1 - tail], axis=1).T]


def block_bootstrap_diff_ci(
    a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray], q: float, confidence: float = 0.95, seed: int = 0
) -> tuple[float, float] | None:
    """Confidence interval of quantile_q(b) - quantile_q(a), two runs each given as (t_ns, values).

    Each run is block-resampled on its own (the runs are independent of each other, their requests are not), so a
    burst in either run widens the interval instead of passing for a change. None when either run is too short.
    """
    draws_a = _block_quantile_draws(*a, (q,), seed)
    draws_b = _block_quantile_draws(*b, (q,), seed + 1)
    if draws_a is None or draws_b is None:
        return None
    tail = (1 - confidence) / 2
    lo, hi = np.quantile(draws_b[0] - draws_a[0], [tail, 1 - tail])
    return float(lo), float(hi)


def wilson_interval(successes: int, trials: int, confidence: float = 0.95) -> tuple[float, float] | None:
    """The Wilson score interval of a share (successes of trials): right near 0 and 1, where the normal approximation
    is not, and never outside [0, 1]. None without trials."""
    if trials <= 0:
        return None
    from scipy.stats import norm

    z = float(norm.ppf(1 - (1 - confidence) / 2))
    share = successes / trials
    denominator = 1 + z * z / trials
    centre = (share + z * z / (2 * trials)) / denominator
    half = z * math.sqrt(share * (1 - share) / trials + z * z / (4 * trials * trials)) / denominator
    # The interval holds the share itself: rounding must not leave 1.0 outside (1 - 1e-16) when every trial succeeded.
    return min(max(0.0, centre - half), share), max(min(1.0, centre + half), share)


def mean_interval(values: np.ndarray, confidence: float = 0.95) -> tuple[float, float] | None:
    """Student's t interval of the mean of independent `values` (the sample's own spread); None for fewer than 2."""
    n = len(values)
    if n < 2:
        return None
    from scipy.stats import t

    mean = float(np.mean(values))
    half = float(t.ppf(1 - (1 - confidence) / 2, n - 1)) * float(np.std(values, ddof=1)) / math.sqrt(n)
    return mean - half, mean + half


def block_bootstrap_rate_diff_ci(
    a: tuple[np.ndarray, np.ndarray, float],
    b: tuple[np.ndarray, np.ndarray, float],
    confidence: float = 0.95,
    seed: int = 0,
) -> tuple[float, float] | None:
    """Confidence interval of rate(b) - rate(a), each run given as (t_ns of each amount, amounts, its window in s): what
    it served per second (tokens, requests). Each run's window is cut into BLOCK_NS stretches, empty ones included (a
    stall serves nothing), and whole stretches are resampled; None when a window holds fewer than two stretches."""
    draws = []
    for k, (t_ns, amounts, window_s) in enumerate((a, b)):
        n_blocks = int(window_s * 1e9 // BLOCK_NS)
        if n_blocks < 2 or len(t_ns) != len(amounts):
            return None
        t0 = int(t_ns.min()) if len(t_ns) else 0
        block = np.minimum((t_ns - t0) // BLOCK_NS, n_blocks - 1)
        sums = np.bincount(block.astype(np.int64), weights=amounts.astype(np.float64), minlength=n_blocks)
        weights = np.random.default_rng(seed + k).multinomial(n_blocks, np.full(n_blocks, 1.0 / n_blocks), size=BOOTSTRAP_DRAWS)
        draws.append(weights @ sums / window_s)
    tail = (1 - confidence) / 2
    lo, hi = np.quantile(draws[1] - draws[0], [tail, 1 - tail])
    return float(lo), float(hi)
