"""Who drives a sharded job, chosen at submission: as many distinct live followers as `target.shards.count` (with its
labels), the least busy first, each able to carry its share of the highest rate with its own generator. A job the
fleet cannot drive is refused with the figures, not left to measure its own load generator."""

from __future__ import annotations

import math

from common.errors import InvalidSpec
from common.spec.job import JobSpec, PointSpec
from common.wire.followers import FollowerView

# A follower that has measured nothing yet costs this much generator CPU per request (its agent's prior).
DEFAULT_CPU_PER_REQUEST_US = 140.0
# `shards: auto` plans each follower's generator at this share of its cores (the headroom one host's scale-out keeps).
AUTO_SHARE = 0.5


def peak_rate(points: list[PointSpec]) -> float:
    """The highest rate any point offers at any moment (a ramp's end, a spike's top)."""
    return max((max(p.rate, p.rate_end or 0.0, p.spike_rate or 0.0) for p in points), default=0.0)


def cost_of(view: FollowerView, spec: JobSpec) -> float:
    """What a request to the job's target costs the follower's generator (us): its calibration against that target,
    else its general figure, else the prior."""
    assert spec.target is not None
    known = view.target_costs_us.get(spec.target.cost_key)
    return known if known is not None else view.info.cpu_per_request_us or DEFAULT_CPU_PER_REQUEST_US


def _eligible(views: list[FollowerView], spec: JobSpec) -> tuple[list[FollowerView], str]:
    """Live followers carrying the job's and the shards' labels, least busy first; and the labels, said."""
    assert spec.target is not None
    wanted = {**spec.requires.labels, **spec.target.shards.labels}
    eligible = [
        v for v in views if v.state in ("ready", "busy") and all(v.info.labels.get(k) == value for k, value in wanted.items())
    ]
    labelled = f" labelled {', '.join(f'{k}={v}' for k, v in sorted(wanted.items()))}" if wanted else ""
    return sorted(eligible, key=lambda v: (len(v.held), v.running_job is not None, v.info.follower_id)), labelled


def sized(views: list[FollowerView], spec: JobSpec, points: list[PointSpec]) -> JobSpec:
    """A `shards: auto` job with its count decided (the spec as stored): enough of the eligible followers that each
    one's generator runs at AUTO_SHARE of its cores at the peak rate, at least 1; InvalidSpec with the figures when
    the fleet has too few."""
    assert spec.target is not None
    eligible, labelled = _eligible(views, spec)
    if not eligible:
        raise InvalidSpec(f"shards: auto found no live follower{labelled}", field="target.shards.count")
    rate = peak_rate(points)
    cost_us = max(cost_of(v, spec) for v in eligible)
    cores = min(max(v.info.generator_cores, 1) for v in eligible)
    n = max(1, math.ceil(rate * cost_us * 1e-6 / (AUTO_SHARE * cores)))
    why = (
        f"shards: auto is {n}: {rate:g} req/s x {cost_us:.0f} us of generator CPU per request over followers of "
        f"{cores} generator core(s), each at most {100 * AUTO_SHARE:g}% busy"
    )
    if n > len(eligible):
        raise InvalidSpec(f"{why}; the fleet has {len(eligible)} live follower(s){labelled}", field="target.shards.count")
    target = spec.target.model_copy(update={"shards": spec.target.shards.model_copy(update={"count": n})})
    return spec.model_copy(update={"target": target})


def choose_shard_followers(views: list[FollowerView], spec: JobSpec, points: list[PointSpec]) -> list[str]:
    """The followers of shards 0..n-1 (shard 0 coordinates); InvalidSpec naming the field when the fleet has too few,
    or too little generator capacity, for the load."""
    assert spec.target is not None
    n = spec.target.shards.n
    if spec.requires.follower is not None:
        raise InvalidSpec("a sharded job runs on several followers: leave requires.follower out", field="requires.follower")
    eligible, labelled = _eligible(views, spec)
    if len(eligible) < n:
        names = ", ".join(sorted(v.info.follower_id for v in eligible)) or "none"
        raise InvalidSpec(
            f"{n} shards need {n} live followers{labelled}; the fleet has {len(eligible)} ({names})", field="target.shards.count"
        )
    chosen = eligible[:n]
    rate = peak_rate(points)
    cost_us = max(cost_of(v, spec) for v in chosen)
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
        )
    return [v.info.follower_id for v in chosen]
