"""Jobs pinned to one follower before placement: a fleet check's job on each follower it checks, and each shard of a
sharded job on the follower chosen for it at submission. A pinned job waits while its follower is away; the placer
honours the pin as any other need (requires.follower)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from common.spec.job import JobSpec
from leader.jobplan import JobPlan


def pinned(spec: JobSpec, follower_id: str) -> JobSpec:
    """The job, to run on `follower_id` alone."""
    return spec.model_copy(update={"requires": spec.requires.model_copy(update={"follower": follower_id})})


def pin_shards(plan: JobPlan, followers: Sequence[str]) -> JobPlan:
    """A sharded job's plan with shard k's part pinned to followers[k] (shard 0, the first, coordinates)."""
    if not plan.sharded or len(followers) != len(plan.parts):
        raise ValueError(f"a sharded plan of {len(plan.parts)} parts needs as many followers, not {len(followers)}")
    parts = [dataclasses.replace(p, spec=pinned(plan.spec, f)) for p, f in zip(plan.parts, followers, strict=True)]
    return dataclasses.replace(plan, parts=parts)
