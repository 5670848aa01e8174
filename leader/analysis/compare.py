"""Comparisons and regressions: job B against job A point by point, and followers of one class against each other."""

from __future__ import annotations

import statistics
from collections.abc import Awaitable, Callable
from typing import Any

import numpy as np
from scipy.stats import mannwhitneyu

from common.analysis import CompareResponse, FollowerOutlier, OutlierResponse, PointComparison

DEFAULT_THRESHOLD = 0.10
BOOTSTRAP_ROUNDS = 400
MAX_BOOTSTRAP_SAMPLES = 20_000  # larger samples are subsampled: the CI is already tight there
CONFIDENCE = 0.95
OUTLIER_THRESHOLD = 0.25

LatencyLoader = Callable[[dict[str, Any]], Awaitable[np.ndarray | None]]


def point_key(row: dict[str, Any]) -> str:
    """What makes two points the same experiment: backend, batch size, arrival pattern and rate."""
    return f"{row['backend']}|b{row['batch_size']}|{row['pattern']}|{row['rate']:g}/s"


def bootstrap_p99_diff(a: np.ndarray, b: np.ndarray, *, seed: int = 0, rounds: int = BOOTSTRAP_ROUNDS) -> tuple[float, float]:
    """Percentile-bootstrap CI of p99(b) - p99(a) in the samples' unit."""
    rng = np.random.default_rng(seed)
    if a.size > MAX_BOOTSTRAP_SAMPLES:
        a = rng.choice(a, MAX_BOOTSTRAP_SAMPLES, replace=False)
    if b.size > MAX_BOOTSTRAP_SAMPLES:
        b = rng.choice(b, MAX_BOOTSTRAP_SAMPLES, replace=False)
    diffs = np.empty(rounds)
    # In chunks so memory stays bounded (rounds x n indices at once would be hundreds of MB).
    chunk = max(1, 2_000_000 // max(a.size, b.size))
    for start in range(0, rounds, chunk):
        n = min(chunk, rounds - start)
        pa = np.quantile(a[rng.integers(0, a.size, (n, a.size))], 0.99, axis=1)
        pb = np.quantile(b[rng.integers(0, b.size, (n, b.size))], 0.99, axis=1)
        diffs[start : start + n] = pb - pa
    alpha = (1 - CONFIDENCE) / 2
    low, high = np.quantile(diffs, [alpha, 1 - alpha])
    return float(low), float(high)


def judge(change: float | None, ci: tuple[float, float] | None, threshold: float) -> str:
    """Regression: p99 grew beyond the threshold and (with raw records) the CI excludes no change."""
    if change is None:
        return "missing"
    if change > threshold and (ci is None or ci[0] > 0):
        return "regression"
    if change < -threshold and (ci is None or ci[1] < 0):
        return "improvement"
    return "unchanged"


async def compare_rows(
    a_rows: list[dict[str, Any]],
    b_rows: list[dict[str, Any]],
    *,
    a: str,
    b: str,
    load_latencies: LatencyLoader,
    threshold: float = DEFAULT_THRESHOLD,
) -> CompareResponse:
    """Match points by key and test each pair (raw latencies when both have records, else the summaries)."""
    a_by = {point_key(row): row for row in a_rows}
    b_by = {point_key(row): row for row in b_rows}
    out: list[PointComparison] = []
    for key in list(a_by) + [k for k in b_by if k not in a_by]:
        ra, rb = a_by.get(key), b_by.get(key)
        pa = ra.get("p99_ms") if ra else None
        pb = rb.get("p99_ms") if rb else None
        change = (pb - pa) / pa if pa and pb is not None else None
        ci: tuple[float, float] | None = None
        p_value: float | None = None
        if ra is not None and rb is not None:
            la, lb = await load_latencies(ra), await load_latencies(rb)
            if la is not None and lb is not None and la.size and lb.size:
                ci = bootstrap_p99_diff(la, lb)
                p_value = float(mannwhitneyu(la, lb, alternative="two-sided").pvalue)
                # The raw records are the truth; the summary p99 is HDR-rounded.
                pa, pb = float(np.quantile(la, 0.99)), float(np.quantile(lb, 0.99))
                change = (pb - pa) / pa if pa else None
        out.append(
            PointComparison(
                key=key,
                a_index=ra["index"] if ra else None,
                b_index=rb["index"] if rb else None,
                a_p99_ms=pa,
                b_p99_ms=pb,
                change=change,
                ci_low=ci[0] if ci else None,
                ci_high=ci[1] if ci else None,
                p_value=p_value,
                test="bootstrap+mannwhitney" if ci else "summary",
                verdict=judge(change, ci, threshold),  # type: ignore[arg-type]
            )
        )
    return CompareResponse(a=a, b=b, threshold=threshold, points=out, regressions=sum(p.verdict == "regression" for p in out))


def follower_outliers(rows: list[dict[str, Any]], *, name: str, threshold: float = OUTLIER_THRESHOLD) -> OutlierResponse:
    """The same job on several followers: a follower whose p99 is beyond threshold above the class median is an outlier."""
    by_key: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        if row.get("p99_ms") is not None:
            by_key.setdefault(point_key(row), []).append(row)
    points: list[FollowerOutlier] = []
    for key, group in sorted(by_key.items()):
        if len({row["follower_id"] for row in group}) < 3:
            continue  # a median of two cannot say which one is odd
        median = statistics.median(row["p99_ms"] for row in group)
        for row in sorted(group, key=lambda r: r["follower_id"]):
            deviation = (row["p99_ms"] - median) / median if median else 0.0
            points.append(
                FollowerOutlier(
                    follower_id=row["follower_id"],
                    job_id=row["job_id"],
                    key=key,
                    p99_ms=row["p99_ms"],
                    median_p99_ms=median,
                    deviation=deviation,
                    outlier=deviation > threshold,
                )
            )
    followers = sorted({row["follower_id"] for row in rows})
    outliers = sorted({p.follower_id for p in points if p.outlier})
    return OutlierResponse(name=name, threshold=threshold, followers=followers, points=points, outliers=outliers)
