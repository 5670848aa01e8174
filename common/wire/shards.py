"""The shard barrier between a sharded job's followers and the leader, as typed messages: a shard's arrival at a
point, the leader's answer (wait, go at one instant, or skip), the figures a shard's upload carries, and what the
coordinator (shard 0) hears of every shard once the point has started."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class _Message(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ShardArrival(_Message):
    """A shard at the barrier: which attempt of it, on which follower, when it arrived (leader clock, ns)."""

    attempt: int
    follower_id: str
    at_ns: int


class BarrierAnswer(_Message):
    """The leader's answer to a shard ready for a point: `waiting` (for the shards named), `go` at `start_at_ns` (the
    leader's clock) with every shard in it, or `skip` for a shard that came after the start."""

    state: Literal["waiting", "go", "skip"]
    waiting_for: list[int] = []
    start_at_ns: int | None = None
    roster: dict[str, ShardArrival] = {}


class ShardFigures(_Message):
    """A shard's run of a point, beside its records: the generator's CPU and wall time, its clock offset to the leader
    and that offset's uncertainty, the median send lag of its first requests, and how many requests it sent."""

    cpu_s: float = 0.0
    wall_s: float = 0.0
    offset_ns: int = 0
    uncertainty_ns: int = Field(default=0, ge=0)
    start_lag_ns: int = 0
    requests: int = Field(default=0, ge=0)


ShardStateName = Literal["uploaded", "waiting", "lost", "absent"]


class ShardState(_Message):
    """One shard of a started point as the coordinator sees it: its records `uploaded` (with their figures), still
    `waiting`, `lost` (its attempt ended without them: the reason says why), or `absent` at the start."""

    shard: int
    state: ShardStateName
    follower_id: str | None = None
    attempt: int | None = None
    reason: str | None = None
    figures: ShardFigures | None = None


class PointShards(_Message):
    """Every shard of a started point, for its coordinator."""

    start_at_ns: int
    shards: list[ShardState]
