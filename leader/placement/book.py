"""The placer's in-memory book of the queue and of every follower's load, kept current from PerfDB by a change feed.

Why: summing every follower's load over all assigned/running jobs in Mongo on every tick costs seconds with
100,000 jobs (bench/scheduler.py). The book is built once from PerfDB (leader start, and a periodic full resync as a
safety net), then kept current by reading only the jobs whose `updated_at` moved since the last tick (every job
transition in leader/store/jobs.py and leader/store/assignments.py sets it). PerfDB stays the only truth: a restarted
leader rebuilds the same book, and a write by another process (a second leader, an admin script) is picked up by the
feed like any other.

Applying a job's change is idempotent ("the job is now in this state"), so documents read twice (the feed re-reads a
short overlap, to catch writes whose timestamp was taken before an earlier read) change nothing.
"""

from __future__ import annotations

import dataclasses
import heapq
import itertools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime

from common.wire.jobs import JobState
from leader.domain import JobChange, Load, Needs, QueuedJob

Kind = tuple[frozenset[str], Needs]
Order = tuple[datetime, str]  # (created_at, job id): the leader's queue is FCFS by submission
ACTIVE = frozenset({JobState.assigned.value, JobState.running.value})


@dataclass
class _KindQueue:
    """The queued jobs of one kind (backends + hardware needs): a lazy heap in submission order."""

    heap: list[Order] = field(default_factory=list)
    members: set[str] = field(default_factory=set)
    stated: str | None = None  # the waiting reason last written for every member
    unstated: set[str] = field(default_factory=set)  # members whose stored reason may differ from `stated`


@dataclass
class _Active:
    follower_id: str
    estimate_s: float
    state: str
    dispatched: bool
    part_of: str | None = None
    team: str = ""
    attempt: int = 1


class JobBook:
    """Queued jobs by kind in submission order, active jobs and per-follower loads, undispatched assignments."""

    def __init__(self) -> None:
        self.queued: dict[str, tuple[Order, QueuedJob, str]] = {}  # job id → (order, job, owner)
        # A queued job's submission in UTC seconds, what its wait is counted from (its order's time, converted once: the
        # fair order reads it for every queued job every time it is made).
        self.since: dict[str, float] = {}
        self.kinds: dict[Kind, _KindQueue] = {}
        self.active: dict[str, _Active] = {}
        self.loads: dict[str, Load] = {}
        self.on_follower: dict[str, set[str]] = {}  # follower → its active jobs
        self.owner_waiting: dict[str, int] = {}
        self.part_followers: dict[str, dict[str, str]] = {}  # split job → its active parts → their followers
        # A queued job's FCFS wait, estimated when this book first saw it: what its wait bound is measured against.
        self.ahead_s: dict[str, float] = {}
        self.version = 0  # moves with every change to the queue, the active jobs or the loads (views derived from them)
        self._applied: dict[str, JobChange] = {}  # the change each job in the book was last made from

    # --- applying PerfDB documents ---------------------------------------------------------------------------

    def apply(self, change: JobChange) -> None:
        """Make the book agree with one job's current state (a change already applied, as the feed reads its overlap
        again every tick, leaves the book and its version as they are)."""
        job_id = change.job_id
        if self._applied.get(job_id) == change:
            return
        self.forget(job_id)
        if change.split:
            return  # a split job is never placed itself: its parts are
        if change.state == JobState.queued.value or (change.state in ACTIVE and change.follower_id):
            self._applied[job_id] = change
        if change.state == JobState.queued.value:
            job = change.queued
            order: Order = (change.created_at, job_id)
            self.queued[job_id] = (order, job, change.owner)
            self.since[job_id] = change.created_at.timestamp()
            kq = self.kinds.setdefault((job.backends, job.needs), _KindQueue())
            kq.members.add(job_id)
            if job.waiting_reason != kq.stated:
                kq.unstated.add(job_id)
            heapq.heappush(kq.heap, order)
            self.owner_waiting[change.owner] = self.owner_waiting.get(change.owner, 0) + 1
        elif change.state in ACTIVE and change.follower_id:
            active = _Active(
                change.follower_id,
                change.estimate_s,
                change.state,
                change.dispatched,
                change.part_of,
                change.queued.team,
                change.queued.attempt,
            )
            self._activate(job_id, active)

    def apply_all(self, changes: Iterable[JobChange]) -> None:
        """Apply several changes."""
        for change in changes:
            self.apply(change)

    def forget(self, job_id: str) -> None:
        """Remove a job from the book (its heap entry goes lazily, on the next pop)."""
        self.version += 1
        self._applied.pop(job_id, None)
        entry = self.queued.pop(job_id, None)
        self.since.pop(job_id, None)
        self.ahead_s.pop(job_id, None)
        if entry is not None:
            _, job, owner = entry
            kq = self.kinds[(job.backends, job.needs)]
            kq.members.discard(job_id)
            kq.unstated.discard(job_id)
            left = self.owner_waiting.get(owner, 1) - 1
            if left:
                self.owner_waiting[owner] = left
            else:
                self.owner_waiting.pop(owner, None)
        active = self.active.pop(job_id, None)
        if active is not None:
            held = self.on_follower.get(active.follower_id, set())
            held.discard(job_id)
            if not held:
                self.on_follower.pop(active.follower_id, None)
            if active.part_of is not None:
                siblings = self.part_followers.get(active.part_of, {})
                siblings.pop(job_id, None)
                if not siblings:
                    self.part_followers.pop(active.part_of, None)
            load = self.loads.get(active.follower_id, Load())
            if load.jobs <= 1:
                # Exactly zero when the queue empties, so float error cannot accumulate across millions of jobs.
                self.loads.pop(active.follower_id, None)
            else:
                self.loads[active.follower_id] = Load(max(0.0, load.seconds - active.estimate_s), load.jobs - 1)

    # --- what the placer asks ---------------------------------------------------------------------------------

    def oldest(self, kind: Kind, limit: int) -> list[QueuedJob]:
        """Up to `limit` queued jobs of one kind, oldest first (popped; `restore` puts back those still queued)."""
        kq = self.kinds.get(kind)
        out: list[QueuedJob] = []
        seen: set[str] = set()
        if kq is None:
            return out
        while kq.heap and len(out) < limit:
            order = heapq.heappop(kq.heap)
            entry = self.queued.get(order[1])
            # A stale entry (the job left the queue, or was requeued and pushed again) is dropped here.
            if entry is None or entry[0] != order or order[1] in seen:
                continue
            seen.add(order[1])
            out.append(entry[1])
        return out

    def restore(self, jobs: Iterable[QueuedJob]) -> None:
        """Put back the heap entries of popped jobs that are still queued."""
        for job in jobs:
            entry = self.queued.get(job.job_id)
            if entry is not None:
                heapq.heappush(self.kinds[(entry[1].backends, entry[1].needs)].heap, entry[0])

    def fcfs_ahead(self, jobs: Iterable[QueuedJob], followers: int) -> dict[str, float]:
        """Each job's wait under first-come-first-served across the fleet (every follower's load and every job queued
        before it, shared over the followers), as first seen: later ticks keep what the first one said."""
        if all(job.job_id in self.ahead_s for job in jobs):
            return self.ahead_s  # (every one seen before: nothing to add, no sort)
        total = sum(load.seconds for load in self.loads.values())
        for job in sorted(jobs, key=lambda j: self.queued[j.job_id][0]):
            if job.job_id not in self.ahead_s:
                self.ahead_s[job.job_id] = total / max(1, followers)
            total += job.estimate_s
        return self.ahead_s

    def teams(self) -> set[str]:
        """The teams with a job queued or active."""
        return {job.team for _, job, _ in self.queued.values()} | {a.team for a in self.active.values()}

    def running_by_team(self) -> dict[str, int]:
        """How many followers run each team's jobs: the job each runs, or for one running nothing, what it was just
        given (it starts that at once); jobs held behind a running one are not counted."""
        runs: dict[str, str] = {}
        for a in self.active.values():
            if a.state == JobState.running.value or a.follower_id not in runs:
                runs[a.follower_id] = a.team
        counts: dict[str, int] = {}
        for team in runs.values():
            counts[team] = counts.get(team, 0) + 1
        return counts

    def runs_nothing(self, follower_id: str) -> bool:
        """Whether the follower has no job of this book's, running or held (what it is given starts at once)."""
        load = self.loads.get(follower_id)
        return load is None or load.jobs <= 0

    def waiting_kinds(self) -> list[Kind]:
        """The kinds with at least one queued job."""
        return [kind for kind, kq in self.kinds.items() if kq.members]

    def to_state(self, kind: Kind, reason: str | None, limit: int) -> list[str]:
        """Up to `limit` ids of the kind's queued jobs whose stored waiting reason is not `reason`."""
        kq = self.kinds[kind]
        if reason != kq.stated:
            # The reason changed: every member storing another one is to be written (a bounded number per tick).
            kq.stated = reason
            kq.unstated = {m for m in kq.members if self.queued[m][1].waiting_reason != reason}
        return list(itertools.islice(kq.unstated, limit))

    def stated(self, kind: Kind, reason: str | None, job_ids: Iterable[str]) -> None:
        """Record that these jobs now store `reason` in PerfDB."""
        kq = self.kinds[kind]
        for job_id in job_ids:
            kq.unstated.discard(job_id)
            entry = self.queued.get(job_id)
            if entry is not None:
                order, job, owner = entry
                self.queued[job_id] = (order, _with_reason(job, reason), owner)

    def placed(self, job: QueuedJob, follower_id: str, estimate_s: float) -> None:
        """The placer assigned the job (not yet dispatched)."""
        self.apply_placed(job.job_id, follower_id, estimate_s, part_of=job.part_of, team=job.team, attempt=job.attempt)

    def apply_placed(
        self,
        job_id: str,
        follower_id: str,
        estimate_s: float,
        *,
        part_of: str | None = None,
        team: str = "",
        attempt: int = 1,
    ) -> None:
        """Account an assignment made by this process before the feed reports it."""
        self.forget(job_id)
        self._activate(job_id, _Active(follower_id, estimate_s, JobState.assigned.value, False, part_of, team, attempt))

    def _activate(self, job_id: str, active: _Active) -> None:
        self.version += 1
        self.active[job_id] = active
        self.on_follower.setdefault(active.follower_id, set()).add(job_id)
        self.loads[active.follower_id] = self.loads.get(active.follower_id, Load()).plus(active.estimate_s)
        if active.part_of is not None:
            self.part_followers.setdefault(active.part_of, {})[job_id] = active.follower_id

    def sibling_follower(self, part_of: str | None) -> str | None:
        """A follower holding another part of the same split job (its hardware class is the parts' class), if any."""
        siblings = self.part_followers.get(part_of) if part_of is not None else None
        return min(siblings.values()) if siblings else None

    def dispatched(self, job_id: str) -> None:
        """The assignment's message is on the follower's queue."""
        active = self.active.get(job_id)
        if active is not None:
            active.dispatched = True

    def sent_to(self, follower_id: str) -> list[tuple[str, int]]:
        """(job, attempt) of the jobs assigned to the follower whose message was sent (not yet claimed)."""
        out = []
        for job_id in self.on_follower.get(follower_id, ()):
            a = self.active[job_id]
            if a.state == JobState.assigned.value and a.dispatched:
                out.append((job_id, a.attempt))
        return out

    def undispatched(self) -> list[str]:
        """Assigned jobs whose message may never have been sent."""
        return [job_id for job_id, a in self.active.items() if a.state == JobState.assigned.value and not a.dispatched]

    def queue_order(self) -> Iterator[tuple[Order, QueuedJob, str]]:
        """Every queued job in submission order (O(n log n): for rare views, not for ticks)."""
        return iter(sorted(self.queued.values(), key=lambda e: e[0]))


def _with_reason(job: QueuedJob, reason: str | None) -> QueuedJob:
    return dataclasses.replace(job, waiting_reason=reason)
