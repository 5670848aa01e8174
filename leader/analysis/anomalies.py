"""Anomalous followers: a robust outlier test across followers that ran the same benchmark, and against each
follower's own history of fleet checks.

The test is Iglewicz and Hoaglin's modified z-score, z = 0.6745 · (x − median) / MAD, with MAD the median absolute
deviation: the median and MAD ignore the very outlier they are looking for, where a mean and standard deviation
would be dragged towards it. A follower is flagged when z exceeds Z_LIMIT (3.5, their recommendation) *and* it is
slower than the median by more than a threshold: equal machines differ by noise, and with four of them the MAD of
that noise can be tiny, so a z-score alone would flag a 3% difference. The MAD is floored at MAD_FLOOR of the median
for the same reason. Only slowness is flagged; a follower faster than its class is not what a fleet check hunts.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from common.wire.analysis import FollowerOutlier, HistoryOutlier, OutlierResponse
from leader.analysis.compare import point_key

Z_LIMIT = 3.5
MAD_FLOOR = 0.02  # of the median
THRESHOLD = 0.25  # the least relative slowdown that counts
MIN_FOLLOWERS = 3  # a median of two cannot say which one is odd
MIN_HISTORY = 3  # earlier checks a follower needs before its own history can judge it


def robust_z(values: Sequence[float], value: float) -> tuple[float, float, float]:
    """(median, MAD floored, modified z of `value`) over `values`."""
    median = statistics.median(values)
    mad = max(statistics.median(abs(v - median) for v in values), MAD_FLOOR * abs(median), 1e-12)
    return median, mad, 0.6745 * (value - median) / mad


def slow_outlier(z: float, value: float, median: float, threshold: float, z_limit: float = Z_LIMIT) -> bool:
    """Flagged: beyond the z limit and slower than the median by more than `threshold`."""
    return z > z_limit and median > 0 and (value - median) / median > threshold


def across_followers(
    rows: list[dict[str, Any]], *, name: str, metric: str = "p99_ms", threshold: float = THRESHOLD
) -> OutlierResponse:
    """Leaderboard rows of the same benchmark on several followers: per point key, each follower against the rest."""
    by_key: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        if row.get(metric) is not None:
            by_key.setdefault(point_key(row), []).append(row)
    points: list[FollowerOutlier] = []
    for key, group in sorted(by_key.items()):
        if len({row["follower_id"] for row in group}) < MIN_FOLLOWERS:
            continue
        values = [float(row[metric]) for row in group]
        for row in sorted(group, key=lambda r: r["follower_id"]):
            value = float(row[metric])
            median, mad, z = robust_z(values, value)
            points.append(
                FollowerOutlier(
                    follower_id=row["follower_id"],
                    job_id=row["job_id"],
                    key=key,
                    metric=metric,
                    value_ms=value,
                    median_ms=median,
                    mad_ms=mad,
                    z=z,
                    deviation=(value - median) / median if median else 0.0,
                    outlier=slow_outlier(z, value, median, threshold),
                )
            )
    return OutlierResponse(
        name=name,
        metric=metric,
        threshold=threshold,
        z_limit=Z_LIMIT,
        followers=sorted({row["follower_id"] for row in rows}),
        points=points,
        outliers=sorted({p.follower_id for p in points if p.outlier}),
    )


def against_history(
    latest: Mapping[tuple[str, str], float], earlier: Mapping[tuple[str, str], list[float]], *, threshold: float = THRESHOLD
) -> list[HistoryOutlier]:
    """Each (follower, key)'s latest figure against its own earlier fleet checks (at least MIN_HISTORY of them): a
    machine that became slower is found even when the whole class is small or slowed together."""
    out = []
    for (follower, key), value in sorted(latest.items()):
        history = earlier.get((follower, key)) or []
        if len(history) < MIN_HISTORY:
            continue
        median, _mad, z = robust_z(history, value)
        out.append(
            HistoryOutlier(
                follower_id=follower,
                key=key,
                value_ms=value,
                history=list(history),
                median_ms=median,
                z=z,
                outlier=slow_outlier(z, value, median, threshold),
            )
        )
    return out
