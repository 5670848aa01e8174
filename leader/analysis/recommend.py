"""The configuration recommender: the best measured configurations that meet an SLO."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from common.wire.analysis import Recommendation, RecommendResponse
from leader.analysis.leaderboard import run_key, samples_per_s, to_row

TOP = 3


def config_key(row: dict[str, Any]) -> tuple[str, str, str, int]:
    """A configuration: the same model on the same backend and hardware at the same batch size."""
    return (row["model"], row["backend"], row["hardware"], row["batch_size"])


def rank_key(row: dict[str, Any]) -> tuple[float, float, float, str]:
    """Most samples/s first (the work served: requests/s alone undervalues larger batches); then cheaper, then lower
    p99; the id makes ties deterministic."""
    cost = row.get("cost_usd_per_1m")
    return (-(samples_per_s(row) or 0.0), cost if cost is not None else float("inf"), row["p99_ms"], row["_id"])


def eligible(
    row: dict[str, Any],
    *,
    p99_ms: float,
    min_throughput: float | None,
    max_cost: float | None,
    model: str | None,
    confident: bool = False,
    min_samples_per_s: float | None = None,
) -> bool:
    """A valid, error-free-enough point that meets every constraint (an unknown cost fails a cost limit).

    `min_throughput` is in requests/s, `min_samples_per_s` in samples (inputs) per second.

    `confident`: the p99 must meet the SLO at the upper end of its 95% CI, so a point that met it by luck of the
    run is not recommended; a point without a recorded CI cannot qualify then.
    """
    if not row.get("valid") or row.get("p99_ms") is None or row.get("throughput") is None:
        return False
    if model is not None and row["model"] != model:
        return False
    if row["p99_ms"] > p99_ms:
        return False
    if confident and (row.get("p99_ci_high_ms") is None or row["p99_ci_high_ms"] > p99_ms):
        return False
    if min_throughput is not None and row["throughput"] < min_throughput:
        return False
    if min_samples_per_s is not None and (samples_per_s(row) or 0.0) < min_samples_per_s:
        return False
    if max_cost is not None:
        cost = row.get("cost_usd_per_1m")
        if cost is None or cost > max_cost:
            return False
    return True


def recommend(
    rows: Iterable[dict[str, Any]],
    *,
    p99_ms: float,
    min_throughput: float | None = None,
    max_cost: float | None = None,
    model: str | None = None,
    top: int = TOP,
    confident: bool = False,
    min_samples_per_s: float | None = None,
) -> RecommendResponse:
    """The top configurations, each backed by its best point and the count of points that qualified.

    A point run several times (a spec's `repeats`) qualifies only if every run does, and stands for its runs by the
    one that served the fewest samples/s: the luckiest of several runs is not evidence.
    """
    runs: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for row in rows:
        runs.setdefault(run_key(row), []).append(row)
    best: dict[tuple[str, str, str, int], dict[str, Any]] = {}
    counts: dict[tuple[str, str, str, int], int] = {}
    considered = 0
    for siblings in runs.values():
        if not all(
            eligible(
                row,
                p99_ms=p99_ms,
                min_throughput=min_throughput,
                max_cost=max_cost,
                model=model,
                confident=confident,
                min_samples_per_s=min_samples_per_s,
            )
            for row in siblings
        ):
            continue
        considered += len(siblings)
        row = max(siblings, key=rank_key)  # the run that ranks last stands for them
        key = config_key(row)
        counts[key] = counts.get(key, 0) + len(siblings)
        if key not in best or rank_key(row) < rank_key(best[key]):
            best[key] = row
    chosen = sorted(best.values(), key=rank_key)[:top]
    recs = [
        Recommendation(
            rank=i + 1,
            model=row["model"],
            backend=row["backend"],
            hardware=row["hardware"],
            batch_size=row["batch_size"],
            throughput=row["throughput"],
            samples_per_s=samples_per_s(row) or 0.0,
            p99_ms=row["p99_ms"],
            p99_ci_high_ms=row.get("p99_ci_high_ms"),
            cost_usd_per_1m=row.get("cost_usd_per_1m"),
            evidence=to_row(row),
            candidates=counts[config_key(row)],
        )
        for i, row in enumerate(chosen)
    ]
    return RecommendResponse(
        p99_ms=p99_ms,
        min_throughput=min_throughput,
        min_samples_per_s=min_samples_per_s,
        max_cost=max_cost,
        model=model,
        confident=confident,
        recommendations=recs,
        considered=considered,
    )
