"""Shared maths: HDR-histogram summaries of nanosecond samples."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
from hdrh.histogram import HdrHistogram

from common.results import Percentiles

# 1 ns to 10 minutes at 3 significant digits: the resolution MEASUREMENT.md asks for.
HIST_LOWEST_NS = 1
HIST_HIGHEST_NS = 600 * 10**9
HIST_DIGITS = 3


def new_histogram() -> HdrHistogram:
    """An empty histogram with benchfleet's fixed range, so any two can be merged."""
    return HdrHistogram(HIST_LOWEST_NS, HIST_HIGHEST_NS, HIST_DIGITS)


def histogram_of(values_ns: Iterable[int]) -> HdrHistogram:
    """Record nanosecond samples (clamped into the histogram's range)."""
    hist = new_histogram()
    for value in values_ns:
        hist.record_value(min(max(int(value), HIST_LOWEST_NS), HIST_HIGHEST_NS))
    return hist


def summarize(hist: HdrHistogram) -> Percentiles | None:
    """Percentiles in milliseconds, or None for an empty histogram."""
    count = hist.get_total_count()
    if count == 0:
        return None
    ms = 1e-6
    return Percentiles(
        count=count,
        mean=hist.get_mean_value() * ms,
        p50=hist.get_value_at_percentile(50) * ms,
        p90=hist.get_value_at_percentile(90) * ms,
        p95=hist.get_value_at_percentile(95) * ms,
        p99=hist.get_value_at_percentile(99) * ms,
        p999=hist.get_value_at_percentile(99.9) * ms,
        max=hist.get_max_value() * ms,
    )


def summarize_ns(values_ns: np.ndarray) -> Percentiles | None:
    """Percentiles in milliseconds of an array of nanosecond samples."""
    return summarize(histogram_of(values_ns.tolist()))


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


def quantile_ci(values: np.ndarray, q: float, confidence: float = 0.95) -> tuple[float, float] | None:
    """Distribution-free confidence interval of the q-quantile from order statistics (binomial, normal approx.).

    The interval [x_(j), x_(k)] covers the true quantile with the given confidence when j and k are the binomial
    count's bounds n·q ∓ z·sqrt(n·q·(1−q)); None when n is too small for both ends to exist.
    """
    n = len(values)
    if n == 0:
        return None
    from statistics import NormalDist

    z = NormalDist().inv_cdf(0.5 + confidence / 2)
    half = z * np.sqrt(n * q * (1 - q))
    j = int(np.floor(n * q - half))
    k = int(np.ceil(n * q + half))
    if j < 0 or k >= n:
        return None
    ordered = np.sort(values)
    return float(ordered[j]), float(ordered[k])
