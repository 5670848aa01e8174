"""Who drives a sharded job, chosen at submission: as many distinct live followers as `target.shards.count` (with its
labels), the least busy first, each able to carry its share of the highest rate with its own generator. A job the
fleet cannot drive is refused with the figures, not left to measure its own load generator."""

from __future__ import annotations

import math

from common.errors import InvalidSpec
from common.followers import FollowerView
from common.spec import JobSpec, PointSpec

# A follower that has measured nothing yet costs this much generator CPU per request (its agent's prior).
DEFAULT_CPU_PER_REQUEST_US = 140.0


def peak_rate(points: list[PointSpec]) -> float:
    """The highest rate any point offers at any moment (a ramp's end, a spike's top)."""
    return max((max(p.rate, p.rate_end or 0.0, p.spike_rate or 0.0) for p in points), default=0.0)


def choose_shard_followers(views: list[FollowerView], spec: JobSpec, points: list[PointSpec]) -> list[str]:
    """The followers of shards 0..n-1 (shard 0 coordinates); InvalidSpec naming the field when the fleet has too few,
    or too little generator capacity, for the load."""
    assert spec.target is not None
    n = spec.target.shards.count
    if spec.requires.follower is not None:
        raise InvalidSpec("a sharded job runs on several followers: leave requires.follower out", field="requires.follower")
    wanted = {**spec.requires.labels, **spec.target.shards.labels}
    eligible = [v for v in views if v.state in ("ready", "busy")
                and all(v.info.labels.get(k) == value for k, value in wanted.items())]  # fmt: skip
    labelled = f" labelled {', '.join(f'{k}={v}' for k, v in sorted(wanted.items()))}" if wanted else ""
    if len(eligible) < n:
        names = ", ".join(sorted(v.info.follower_id for v in eligible)) or "none"
        raise InvalidSpec(f"{n} shards need {n} live followers{labelled}; the fleet has {len(eligible)} ({names})",
                          field="target.shards.count")  # fmt: skip
    chosen = sorted(eligible, key=lambda v: (len(v.held), v.running_job is not None, v.info.follower_id))[:n]
    rate = peak_rate(points)
    cost_us = max(v.info.cpu_per_request_us or DEFAULT_CPU_PER_REQUEST_US for v in chosen)
    each = rate / n
    needed = each * cost_us * 1e-6  # generator cores per shard
    short = [v for v in chosen if needed > max(v.info.generator_cores, 1)]
    if short:
        fewest = min(max(v.info.generator_cores, 1) for v in chosen)
        enough = math.ceil(rate * cost_us * 1e-6 / fewest)
        raise InvalidSpec(
            f"{rate:g} req/s over {n} shards is {each:g} req/s each; at {cost_us:.0f} us of generator CPU per request "
            f"that needs {needed:.2f} generator cores per follower, and {short[0].info.follower_id} has "
            f"{short[0].info.generator_cores}: ask for at least {enough} shards (or a lower rate)",
            field="target.shards.count",
        )  # fmt: skip
    return [v.info.follower_id for v in chosen]
