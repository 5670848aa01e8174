"""A submission planned once: its grid expanded, split into parts where asked, and estimated. The limits, the store
and the estimator all read this one plan; nothing expands a spec's grid again."""

from __future__ import annotations

from dataclasses import dataclass

from common.spec.grid import START_COST_S, estimate_seconds, expand, server_runs, server_starts
from common.spec.job import JobSpec, PointSpec, SplitSpec


@dataclass(frozen=True)
class PartPlan:
    """One part of a split job: a contiguous run of the grid's points, numbered from 0 within the part."""

    points: list[PointSpec]
    start: int  # index of its first point in the split job's grid
    estimate_s: float
    measured_s: float
    spec: JobSpec | None = None  # its own spec where it is not the job's (a shard pinned to its follower)


@dataclass(frozen=True)
class JobPlan:
    """A submission's points and estimates; `parts` is empty unless it splits into two or more, or is driven by
    several followers at once (`sharded`: every part holds every point, each drives its own share of the load)."""

    spec: JobSpec
    points: list[PointSpec]
    estimate_s: float  # spec estimate: every point's warm-up and run plus a start cost per server start
    measured_s: float  # the load's share of it, which the estimator's learned rate applies to
    parts: list[PartPlan]
    sharded: bool = False

    @property
    def jobs_created(self) -> int:
        """Waiting jobs the submission adds: its parts for a split job (the split job itself never waits), else 1."""
        return len(self.parts) or 1


def plan_job(spec: JobSpec) -> JobPlan:
    """The plan of a validated spec."""
    points = expand(spec)
    estimate = estimate_seconds(spec)
    groups = split_points(points, spec.split)
    parts: list[PartPlan] = []
    starts_s = START_COST_S * server_starts(spec)
    if len(groups) >= 2:
        per_point = (estimate - starts_s) / len(points)
        start = 0
        for group in groups:
            starts = len(server_runs(group, spec.repeats.fresh_server))
            part_estimate = round(per_point * len(group) + START_COST_S * starts, 3)
            renumbered = [p.model_copy(update={"index": i}) for i, p in enumerate(group)]
            parts.append(PartPlan(renumbered, start, part_estimate, round(per_point * len(group), 3)))
            start += len(group)
    measured = round(max(0.0, estimate - starts_s), 3)
    shards = spec.target.shards.n if spec.target is not None else 1
    if shards > 1:  # every shard runs every point, at once: each part is the whole grid
        parts = [PartPlan(points, 0, estimate, measured) for _ in range(shards)]
    return JobPlan(spec=spec, points=points, estimate_s=estimate, measured_s=measured, parts=parts, sharded=shards > 1)


def split_points(points: list[PointSpec], split: SplitSpec | None) -> list[list[PointSpec]]:
    """The grid's points in contiguous parts of near-equal size (one part when the spec asks for no split)."""
    if split is None:
        return [points]
    n = min(split.max_parts, len(points) // split.min_points)
    if n < 2:
        return [points]
    size, extra = divmod(len(points), n)
    out, start = [], 0
    for k in range(n):
        end = start + size + (1 if k < extra else 0)
        out.append(points[start:end])
        start = end
    return out
