"""The job lifecycle: a job's states and every transition between them, as pure functions over a typed job value.

    queued ──assign──▶ assigned ──claim──▶ running ──finish──▶ succeeded | failed
      ▲  ◀──unassign── (never sent)           │
      └──────────requeue (a new attempt)──────┘          cancel / fail: any unfinished state ──▶ cancelled | failed

A requeue (missed heartbeats, a message the broker lost, a drained follower) puts an assigned or running job back in
the queue as its next attempt; reports of an older attempt are refused as stale. A split job is never placed itself:
it runs once its first part does and settles when every part has ended. A sharded job's coordinator (shard 0) merges
the other shards' records; when it ends, the shards that still owe records are cancelled.

Each transition takes the job as last read and returns a `Change`: the guard (the state, attempt and holder it was
read with, which must still hold when it is written), the fields it sets, the history entry it appends, and the
follow-on effects its caller carries out once it applied. A refusal is a Conflict naming why. The stores
(leader/store/jobs.py, leader/store/assignments.py) apply a Change with one conditional update; nothing here reads
or writes a database.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from common.errors import Conflict
from common.wire.jobs import TERMINAL_STATES, JobState, StateChange

ACTIVE = frozenset({JobState.assigned, JobState.running})
MAX_LOST_RUNS = 2  # running attempts a job may lose with its follower before it is failed (requeue(lost_to=...))


@dataclass(frozen=True, slots=True)
class Job:
    """What the lifecycle reads of a job (leader/store/jobdocs.py makes it from a stored document)."""

    job_id: str
    state: JobState
    attempt: int
    follower_id: str | None = None
    dispatched: bool = False
    error: str | None = None
    part_of: str | None = None  # a part of this split job
    parts: tuple[str, ...] = ()  # a split job's parts, in order
    shards: int = 0  # a sharded job: how many followers drive it at once (its parts are the shards)
    shard_index: int | None = None  # a shard: its index (0 coordinates)
    points: int = 0  # how many points the job (a shard: each shard) measures
    started_at: datetime | None = None  # when the current attempt began running
    # Earlier attempts whose follower stopped (died, restarted) while running them, each as loss_key(follower,
    # incarnation). A loss is taken back when that same process is heard again (it was silent, not dead).
    lost_to: tuple[str, ...] = ()

    @property
    def finished(self) -> bool:
        return self.state in TERMINAL_STATES


@dataclass(frozen=True, slots=True)
class Guard:
    """What must still hold when a Change is written: the job's state and attempt as read, its holder where the
    transition depends on it, and whether its message was sent where that matters."""

    state: JobState
    attempt: int
    follower_id: str | None = None
    check_follower: bool = False
    dispatched: bool | None = None


@dataclass(frozen=True, slots=True)
class CancelParts:
    """Cancel each of these parts that has not finished (a cancelled or failed split job stops its parts)."""

    part_ids: tuple[str, ...]
    reason: str


@dataclass(frozen=True, slots=True)
class StartSplit:
    """The split job starts running with its first part (a no-op for the later parts)."""

    job_id: str
    part_id: str


@dataclass(frozen=True, slots=True)
class SettleSplit:
    """A part ended: settle its split job if every part has (settle())."""

    job_id: str


@dataclass(frozen=True, slots=True)
class CancelOwingShards:
    """The coordinator ended: cancel the job's shards whose records of some point never arrived (shards_owing())."""

    job_id: str
    reason: str


@dataclass(frozen=True, slots=True)
class RecordRunTime:
    """Teach the estimator the attempt's run time (seconds) on its follower."""

    actual_s: float
    follower_id: str


Effect = CancelParts | StartSplit | SettleSplit | CancelOwingShards | RecordRunTime


@dataclass(frozen=True, slots=True)
class Change:
    """One transition: applied only where `guard` still holds; sets `state`, `attempt` and `fields`, appends `entry`;
    then its caller carries out `effects`, in order."""

    job_id: str
    guard: Guard
    state: JobState
    attempt: int
    entry: StateChange
    fields: Mapping[str, Any] = field(default_factory=dict)
    effects: tuple[Effect, ...] = ()

    def apply_to(self, job: Job) -> Job:
        """The job as this change leaves it (what a reader sees once it is written)."""
        values: dict[str, Any] = {k: tuple(v) if k == "lost_to" else v for k, v in self.fields.items() if k in _JOB_FIELDS}
        # The attempt starts when it runs; a new attempt has not started yet.
        started = self.entry.at if self.state == JobState.running else job.started_at if self.attempt == job.attempt else None
        return replace(job, state=self.state, attempt=self.attempt, started_at=started, **values)


_JOB_FIELDS = frozenset({"follower_id", "dispatched", "error", "lost_to"})


def _entry(
    state: JobState, attempt: int, now: datetime, *, reason: str | None = None, follower_id: str | None = None
) -> StateChange:
    return StateChange(state=state, at=now, attempt=attempt, reason=reason, follower_id=follower_id)


def stale_reason(job: Job, attempt: int, follower_id: str, *, wanted: JobState) -> str:
    """Why a follower's claim or report of (attempt, follower) does not match the job as it is."""
    if job.attempt != attempt:
        return f"attempt {attempt} is stale: job {job.job_id} is on attempt {job.attempt}"
    if job.follower_id != follower_id:
        return f"job {job.job_id} attempt {attempt} is not held by follower {follower_id}"
    return f"job {job.job_id} is {job.state.value}, not {wanted.value}"


def _held(job: Job, attempt: int, follower_id: str, state: JobState) -> bool:
    return job.state == state and job.attempt == attempt and job.follower_id == follower_id


# ---- the placer's transitions ----


def assign(
    job: Job, *, follower_id: str, now: datetime, estimate_s: float | None = None, spread_s: float | None = None
) -> Change | None:
    """queued → assigned to a follower (its message not yet sent), with the estimate corrected for that follower, in
    the same write so no reader sees the follower's load without it; None if the job is not queued."""
    if job.state != JobState.queued or job.parts:
        return None
    fields: dict[str, Any] = {"follower_id": follower_id, "dispatched": False, "waiting_reason": None}
    if estimate_s is not None:
        fields["estimate_s"] = estimate_s
        fields["estimate_spread_s"] = None if spread_s is None else round(spread_s, 3)
    return Change(
        job.job_id,
        Guard(JobState.queued, job.attempt),
        JobState.assigned,
        job.attempt,
        _entry(JobState.assigned, job.attempt, now, follower_id=follower_id),
        fields,
    )


def unassign(job: Job, *, reason: str, now: datetime) -> Change | None:
    """assigned but never sent → queued, same attempt (the follower never saw it); None otherwise."""
    if job.state != JobState.assigned or job.dispatched:
        return None
    return Change(
        job.job_id,
        Guard(JobState.assigned, job.attempt, dispatched=False),
        JobState.queued,
        job.attempt,
        _entry(JobState.queued, job.attempt, now, reason=reason),
        {"follower_id": None},
    )


def loss_key(follower_id: str, incarnation: str | None) -> str:
    """How a job records losing a run to this follower process (Job.lost_to)."""
    return f"{follower_id}/{incarnation or '?'}"


def requeue(job: Job, *, reason: str, now: datetime, lost_to: str | None = None) -> Change | None:
    """assigned or running → queued as the next attempt (its follower missed its heartbeats, never received it, or is
    drained); the old attempt's reports are refused from then on. `reason` may name `{follower_id}`. None if the job
    is not held by a follower.

    `lost_to` (a loss_key): the follower process stopped without giving the job back (it died, went silent, or came
    back as a new process). A job that loses MAX_LOST_RUNS running attempts so is failed instead, naming it: a job that
    kills its follower (a model that exhausts its memory, say) must not walk the fleet killing each one in turn. A
    follower that was only silent (a starved host, a partition) and is heard again as the same process did not die:
    leader/store/assignments.forgive takes its losses back, so a busy host never fails the jobs it runs."""
    if job.state not in ACTIVE:
        return None
    why = reason.format(follower_id=job.follower_id)
    counted = lost_to is not None and job.state == JobState.running
    if counted and len(job.lost_to) + 1 >= MAX_LOST_RUNS:
        times = "twice" if MAX_LOST_RUNS == 2 else f"{MAX_LOST_RUNS} times"
        said = f"its follower stopped while running it, {times} (last: {why}); not requeued again: read the followers' logs"
        failed = end(job, state=JobState.failed, reason=said, now=now)
        return replace(failed, guard=Guard(job.state, job.attempt, job.follower_id, check_follower=True))
    attempt = job.attempt + 1
    lost = (*job.lost_to, lost_to) if counted and lost_to is not None else job.lost_to
    return Change(
        job.job_id,
        Guard(job.state, job.attempt, job.follower_id, check_follower=True),
        JobState.queued,
        attempt,
        _entry(JobState.queued, attempt, now, reason=why),
        {"follower_id": None, "dispatched": False, "points_done": 0, "lost_to": list(lost)},
    )


# ---- the follower's transitions ----


def claim(job: Job, *, attempt: int, follower_id: str, now: datetime) -> Change:
    """assigned → running for exactly this follower and attempt, once; a Conflict naming why otherwise. The split job
    starts with its first part."""
    if not _held(job, attempt, follower_id, JobState.assigned):
        raise Conflict(stale_reason(job, attempt, follower_id, wanted=JobState.assigned), field="attempt")
    effects: tuple[Effect, ...] = (StartSplit(job.part_of, job.job_id),) if job.part_of else ()
    return Change(
        job.job_id,
        Guard(JobState.assigned, attempt, follower_id, check_follower=True),
        JobState.running,
        attempt,
        _entry(JobState.running, attempt, now, follower_id=follower_id),
        {"dispatched": True},  # the follower holds the message, whatever the leader managed to record before
        effects,
    )


def start_split(job: Job, *, part_id: str, now: datetime) -> Change | None:
    """A split job runs once its first part does: queued → running; None if it already runs (or ended)."""
    if job.state != JobState.queued:
        return None
    return Change(
        job.job_id,
        Guard(JobState.queued, job.attempt),
        JobState.running,
        job.attempt,
        _entry(JobState.running, job.attempt, now, reason=f"part {part_id} started"),
    )


def check_running(job: Job, *, attempt: int, follower_id: str) -> None:
    """A report of a point is taken only from the running attempt's follower; a Conflict naming why otherwise."""
    if not _held(job, attempt, follower_id, JobState.running):
        raise Conflict(stale_reason(job, attempt, follower_id, wanted=JobState.running), field="attempt")


def run_time_s(job: Job, *, elapsed_s: float | None, now: datetime) -> float | None:
    """The attempt's run time: the follower's monotonic figure, else (an older agent) the leader's wall clock since it
    started, if that is not negative (a clock stepped back)."""
    if elapsed_s is not None:
        return round(elapsed_s, 3)
    if job.started_at is not None and (wall_s := (now - job.started_at).total_seconds()) >= 0:
        return round(wall_s, 3)
    return None


def finish(
    job: Job, *, attempt: int, follower_id: str, state: JobState, error: str | None, elapsed_s: float | None, now: datetime
) -> Change | None:
    """running → succeeded or failed for this attempt. None when the same finish was already written (a retried
    report); a Conflict for any other report. A succeeded attempt teaches the estimator its run time; a part settles
    its split job; the coordinator of a sharded job cancels the shards still owing records."""
    if state not in (JobState.succeeded, JobState.failed):
        raise Conflict(f"a follower finishes an attempt as succeeded or failed, not {state.value}", field="state")
    if not _held(job, attempt, follower_id, JobState.running):
        if job.attempt == attempt and job.follower_id == follower_id and job.state == state and job.error == error:
            return None
        raise Conflict(stale_reason(job, attempt, follower_id, wanted=JobState.running), field="attempt")
    actual_s = run_time_s(job, elapsed_s=elapsed_s, now=now) if state == JobState.succeeded else None
    effects: list[Effect] = []
    if actual_s is not None:
        effects.append(RecordRunTime(actual_s, follower_id))
    if job.shard_index == 0 and job.part_of:
        effects.append(CancelOwingShards(job.part_of, f"shard 0 (the coordinator) {state.value}"))
    if job.part_of:
        effects.append(SettleSplit(job.part_of))
    return Change(
        job.job_id,
        Guard(JobState.running, attempt, follower_id, check_follower=True),
        state,
        attempt,
        _entry(state, attempt, now, reason=error, follower_id=follower_id),
        {"error": error, "actual_s": actual_s},
        tuple(effects),
    )


# ---- the submitter's (and the operator's) transitions ----


def end(job: Job, *, state: JobState, reason: str, now: datetime) -> Change:
    """Any unfinished state → cancelled (by its user) or failed (from outside its attempt: its on-demand pod failed);
    a Conflict if it has finished. A follower holding it learns on its next report or heartbeat. A split job stops its
    parts; a part settles its split job."""
    if state not in (JobState.cancelled, JobState.failed):
        raise Conflict(f"a job is ended as cancelled or failed, not {state.value}", field="state")
    if job.finished:
        raise Conflict(f"job {job.job_id} is already {job.state.value}", field="state")
    effects: list[Effect] = []
    if job.parts:
        effects.append(CancelParts(job.parts, reason))
    if job.part_of:
        effects.append(SettleSplit(job.part_of))
    return Change(
        job.job_id,
        Guard(job.state, job.attempt),
        state,
        job.attempt,
        _entry(state, job.attempt, now, reason=reason),
        {"error": reason} if state == JobState.failed else {},
        tuple(effects),
    )


# ---- split and sharded jobs ----


@dataclass(frozen=True, slots=True)
class Part:
    """What settling a split job reads of one part."""

    job_id: str
    state: JobState
    points_done: int = 0
    error: str | None = None


def counted_parts(parts: Sequence[str], *, sharded: bool) -> tuple[str, ...]:
    """The parts whose points are the job's: every part of a split job; a sharded job's coordinator (shard 0) only,
    which merged every shard's records into its points."""
    return tuple(parts[:1] if sharded else parts)


def settle(job: Job, parts: Sequence[Part], *, now: datetime) -> Change | None:
    """A split job ends once every part has: succeeded if all did, cancelled if every other one was cancelled, else
    failed naming the parts that did not succeed. A sharded job ends as its coordinator did. None while a part runs,
    or once the job has ended (so two parts finishing at once, or a retried report, settle it exactly once)."""
    if job.finished or not job.parts:
        return None
    by_id = {p.job_id: p for p in parts}
    if any(part_id not in by_id or by_id[part_id].state not in TERMINAL_STATES for part_id in job.parts):
        return None
    counted = [by_id[part_id] for part_id in counted_parts(job.parts, sharded=bool(job.shards))]
    bad = sorted((p for p in counted if p.state != JobState.succeeded), key=lambda p: p.job_id)
    error: str | None = None
    if not bad:
        state = JobState.succeeded
    elif all(p.state == JobState.cancelled for p in bad):
        state = JobState.cancelled
    else:
        state = JobState.failed
        error = "; ".join(f"part {p.job_id} {p.state.value}: {p.error or 'no reason given'}" for p in bad)
    return Change(
        job.job_id,
        Guard(job.state, job.attempt),
        state,
        job.attempt,
        _entry(state, job.attempt, now, reason=error or f"all {len(counted)} parts {state.value}"),
        {"error": error, "points_done": sum(p.points_done for p in counted)},
    )


def shards_owing(parts: Sequence[str], delivered: Mapping[int, set[int]], *, points: int) -> list[str]:
    """The shards of a sharded job (after the coordinator, parts[0]) whose records of some of its `points` never
    arrived (`delivered`: shard index → the points whose records it delivered)."""
    return [part for k, part in enumerate(parts) if k > 0 and len(delivered.get(k, set())) < points]


# ---- what a follower holds ----


def stale_held(follower_id: str, held: Iterable[tuple[str, int]], jobs: Mapping[str, Job]) -> list[str]:
    """Of the (job, attempt) pairs a follower holds, those the leader no longer wants it to run: cancelled, finished,
    requeued as a newer attempt, or held by another follower (`jobs`: the held jobs as read; a missing one is gone)."""
    out = set()
    for job_id, attempt in held:
        job = jobs.get(job_id)
        if job is None or job.state not in ACTIVE or job.attempt != attempt or job.follower_id != follower_id:
            out.add(job_id)
    return sorted(out)
