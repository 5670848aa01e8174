"""Job lifecycle schemas: states, the Celery task payload, the follower's reports and the API view."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, computed_field, field_validator

from common.base import NAME_PATTERN
from common.spec.job import JobSpec, ModelRef, PointSpec
from common.wire.auth import DEFAULT_TEAM
from common.wire.imports import ImportedRun
from common.wire.models import ModelMeta
from common.wire.repeats import RepeatSummary
from common.wire.results import PointResult


class JobState(StrEnum):
    queued = "queued"
    assigned = "assigned"
    running = "running"
    succeeded = "succeeded"
    failed = "failed"
    cancelled = "cancelled"


# Bounded so a report can always be stored (Mongo integers are 64-bit) and a garbage value is a 422, not a 500.
Attempt = Annotated[int, Field(ge=1, le=1_000_000)]

TERMINAL_STATES = frozenset({JobState.succeeded, JobState.failed, JobState.cancelled})


class StateChange(BaseModel):
    """One entry of a job's history."""

    state: JobState
    at: datetime
    attempt: int
    reason: str | None = None
    follower_id: str | None = None


class ShardTask(BaseModel):
    """Which share of a sharded job's load an attempt drives: shard `index` of `count`, of job `of` (the job the user
    submitted; shard 0, the coordinator, merges every shard's records into the job's points)."""

    model_config = ConfigDict(extra="forbid")

    of: str
    index: int
    count: int


class JobTask(BaseModel):
    """The Celery task argument: everything a follower needs to run one attempt of a job."""

    model_config = ConfigDict(extra="forbid")

    job_id: str
    attempt: int
    spec: JobSpec
    points: list[PointSpec]
    model: ModelMeta
    estimate_s: float
    colocated: list[ModelMeta] = []  # a co-location job's other models (spec.colocate.models, resolved), in order
    shard: ShardTask | None = None  # a shard of a sharded job (target.shards)
    traceparent: str | None = None  # the job's trace (W3C): the follower's spans and log lines join it (common/tracing.py)


class Claim(BaseModel):
    """A follower asks to start an attempt; the leader grants it once (assigned → running)."""

    model_config = ConfigDict(extra="forbid")

    attempt: Attempt
    follower_id: Annotated[str, Field(pattern=NAME_PATTERN)]
    incarnation: str


class PointReport(BaseModel):
    """One finished point of an attempt; stored idempotently by (job, attempt, point index)."""

    model_config = ConfigDict(extra="forbid")

    attempt: Attempt
    follower_id: Annotated[str, Field(pattern=NAME_PATTERN)]
    result: PointResult


class FinishReport(BaseModel):
    """The end of an attempt."""

    model_config = ConfigDict(extra="forbid")

    attempt: Attempt
    follower_id: Annotated[str, Field(pattern=NAME_PATTERN)]
    state: Literal["succeeded", "failed"]
    error: str | None = None
    # The attempt's run time by the follower's monotonic clock (what the leader learns estimates from: a step of
    # either wall clock changes nothing). None from agents that do not send it: the leader's wall clock, if sane.
    elapsed_s: Annotated[float, Field(ge=0, le=30 * 86400)] | None = None


class JobView(BaseModel):
    """A job as the API shows it."""

    id: str
    name: str
    state: JobState
    attempt: int
    follower_id: str | None
    spec: JobSpec
    model_ref: str
    points_total: int
    points_done: int
    estimate_s: float  # run time when the server keeps up with every point
    # The most the runs can take: every point overloading its server and waiting its drain bound (common.spec.grid).
    estimate_max_s: float | None = None
    # The learned estimate's uncertainty (sd of how long jobs of its kind took around their estimates; None: none yet)
    estimate_spread_s: float | None = None
    created_at: datetime
    updated_at: datetime
    error: str | None = None
    history: list[StateChange]
    owner: str = "admin"  # the submitting token's user; only they (or an admin) may cancel it
    team: str = DEFAULT_TEAM  # the model's team, which is the submitter's
    waiting_reason: str | None = None  # why a queued job is not placed, or why its follower has not started it
    actual_s: float | None = None  # measured run time of the finished attempt (the estimate's error is reported from it)
    queue_position: int | None = None  # 1 = next on its follower (or in the leader's queue)
    estimated_start: datetime | None = None
    parts: list[str] = []  # a split job (spec.split): the ids of its part jobs, whose points make up its result
    part_of: str | None = None  # a part job: the split job it belongs to
    part_start: int | None = None  # a part job: the split job's index of its point 0 (its points map back from there)
    records_expired_at: datetime | None = None  # when retention removed its raw records (its results stay)
    traceparent: str | None = None  # the job's trace (W3C traceparent of its submission): every span of its way is in it
    colocated_refs: list[str] = []  # a co-location job's other models as they ran (name:version), in spec order
    # `imported`: measured by another tool and imported from its files (its spec describes the run; nothing runs it)
    kind: Literal["benchmark", "imported"] = "benchmark"
    imported: ImportedRun | None = None

    def started_at(self) -> datetime | None:
        """When its current attempt started running (None: it has not)."""
        runs = [h.at for h in self.history if h.state == JobState.running and h.attempt == self.attempt]
        return runs[-1] if runs else None

    @computed_field  # type: ignore[prop-decorator]
    @property
    def trace_id(self) -> str | None:
        """The job's trace id (what a tracing backend and the log lines name it by)."""
        return self.traceparent.split("-")[1] if self.traceparent else None


class JobFilter(BaseModel):
    """Which jobs a list shows (every field optional; all given must hold): the API's and the console's job lists."""

    team: Annotated[str, Field(max_length=100)] | None = None  # an admin's choice (a user sees only their team's)
    state: JobState | None = None
    owner: Annotated[str, Field(max_length=100)] | None = None  # the submitting user
    model: Annotated[str, Field(max_length=200)] | None = None  # a model's name (every version) or name:version
    backend: Annotated[str, Field(max_length=50)] | None = None  # one of the job's backends
    follower_id: Annotated[str, Field(max_length=100)] | None = None  # where it runs or ran
    since: datetime | None = None  # submitted at or after

    @field_validator("since", mode="before")
    @classmethod
    def _a_date(cls, value: object) -> object:
        """A date or a date and time: a bare number (which pydantic would read as seconds since 1970) is refused."""
        if isinstance(value, int | float) or (isinstance(value, str) and re.fullmatch(r"\s*[+-]?[\d.]+\s*", value)):
            raise ValueError("a date (2026-11-28) or a date and time (2026-11-28T12:00:00Z), not a number")
        return value

    def admits(self, job: JobFacets) -> bool:
        """Whether a job with these facets is one the filters select."""
        model_ok = not self.model or (
            job.model_ref == self.model if ":" in self.model else job.model_ref.startswith(self.model + ":")
        )
        return (
            (not self.team or job.team == self.team)
            and (self.state is None or job.state == self.state.value)
            and (not self.owner or job.owner == self.owner)
            and model_ok
            and (not self.backend or self.backend in job.backends)
            and (not self.follower_id or job.follower_id == self.follower_id)
            and (self.since is None or job.created_at >= _aware(self.since))
        )


def _aware(at: datetime) -> datetime:
    """A filter's time as UTC (a time given without a zone is UTC)."""
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class JobFacets:
    """What a job list filters a job by (leader.store.joblist keeps them for every job)."""

    team: str
    state: str
    owner: str
    model_ref: str
    backends: tuple[str, ...]
    follower_id: str | None
    created_at: datetime  # UTC
    split: bool = False  # a job split into parts (its parts are jobs of their own)


class SubmitPreview(BaseModel):
    """What submitting a spec now would do, checked exactly as a submission is and stored nowhere."""

    name: str
    model_ref: str
    points: int
    jobs: int  # jobs it creates (a split job's parts; else 1)
    estimate_s: float  # run time when the server keeps up with every point (the spec's estimate)
    estimate_max_s: float | None = None  # every point overloading its server and waiting its drain bound
    follower_id: str | None = None  # where placement would send it now (None: no follower can run it now)
    jobs_ahead: int = 0  # jobs that would run there (or be placed) before it
    start_in_s: float | None = None  # about when it would start, from now
    waiting_reason: str | None = None  # why no follower can run it now

    def describe(self) -> str:
        """The preview in a sentence."""
        what = f"{self.points} point{'s' if self.points != 1 else ''}, about {self.estimate_s:.0f} s"
        if self.follower_id is None:
            return f"{what}; it would wait: {self.waiting_reason}"
        ahead = f"after {self.jobs_ahead} job{'s' if self.jobs_ahead != 1 else ''}" if self.jobs_ahead else "at once"
        start = f", starting in about {self.start_in_s:.0f} s" if self.jobs_ahead and self.start_in_s is not None else ""
        return f"{what}; it would run on follower {self.follower_id} {ahead}{start}"


def as_ran(job: JobView) -> JobSpec:
    """The job's spec exactly as it ran, to submit again: its model (and a co-location's other models) pinned to the
    version it ran (a spec that named the
    latest version would now get whatever is latest); the same seed, so the same schedules. A part of a split job is
    not one: rerun the split job."""
    if job.part_of is not None:
        raise ValueError(f"job {job.id} is a part of split job {job.part_of}: rerun that job")
    update: dict[str, object] = {"model": ModelRef(ref=job.model_ref)}
    if job.spec.colocate is not None and job.colocated_refs:  # its other models too, at the versions they ran
        update["colocate"] = job.spec.colocate.model_copy(update={"models": list(job.colocated_refs)})
    return job.spec.model_copy(update=update)


class JobResults(BaseModel):
    """A job with the point results of its current attempt."""

    job: JobView
    points: list[PointResult]
    # With `repeats`: per configuration run more than once, the spread across its runs and the verdict on it.
    repeats: list[RepeatSummary] = []


class Stored(BaseModel):
    """What one kind of a job's data holds in PerfDB: documents (or files) and their bytes."""

    documents: int = 0
    bytes: int = 0


class JobFootprint(BaseModel):
    """A job's data in PerfDB, kind by kind (its document, results, leaderboard rows, raw records, progress, a sharded
    job's barrier and shard records), what a deletion removes (or, dry, would)."""

    job_id: str
    job_ids: list[str]  # the job and its parts
    deleted: bool
    kinds: dict[str, Stored]

    @property
    def bytes(self) -> int:
        return sum(s.bytes for s in self.kinds.values())
