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
