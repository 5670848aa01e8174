"""Plain values the stores hand the scheduler: no database types, so placement is pure and testable."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from common.spec.grid import START_COST_S


@dataclass(frozen=True)
class Gpu:
    """One GPU of a follower, as placement compares it."""

    name: str
    memory_mb: int


@dataclass(frozen=True)
class Needs:
    """The hardware a job requires (from the spec's `requires`)."""

    gpu: bool = False
    gpu_model: str | None = None
    min_gpu_memory_mb: int | None = None
    follower: str | None = None  # pinned to this follower (a fleet check's job)
    labels: tuple[tuple[str, str], ...] = ()  # every one of these (name, value) labels, sorted (Needs stays hashable)


@dataclass(frozen=True)
class Candidate:
    """A follower that may take work: alive (ready or busy), not draining, its backends and GPUs."""

    follower_id: str
    backends: frozenset[str]
    gpus: tuple[Gpu, ...] = ()
    labels: tuple[tuple[str, str], ...] = ()  # the follower's (name, value) labels, sorted

    @property
    def follower_class(self) -> str:
        """What its use is accounted and its quotas are kept by (follower_class)."""
        return follower_class(dict(self.labels), [g.name for g in self.gpus])


# The label a follower's class is read from (else its first GPU's model, else "cpu").
CLASS_LABEL = "class"


def follower_class(labels: dict[str, str], gpu_names: list[str]) -> str:
    """A follower's class: its `class` label, else its first GPU's model, else cpu."""
    return str(labels.get(CLASS_LABEL) or (gpu_names[0] if gpu_names else "cpu"))


@dataclass(frozen=True)
class Load:
    """What a follower already holds: the summed estimate of its assigned/running jobs and their count."""

    seconds: float = 0.0
    jobs: int = 0

    def plus(self, seconds: float) -> Load:
        """This load with one more job of the given estimate."""
        return Load(self.seconds + seconds, self.jobs + 1)


@dataclass(frozen=True)
class QueuedJob:
    """A job waiting for placement: what the choice needs and what the conditional update filters on."""

    job_id: str
    attempt: int
    backends: frozenset[str]
    estimate_s: float
    needs: Needs = field(default_factory=Needs)
    waiting_reason: str | None = None  # the reason last stored, so an unchanged reason is not written again
    model_ref: str = ""  # with the backends and the follower, the key of the estimator's history correction
    part_of: str | None = None  # a part of a split job: placed on a follower of the same hardware class as its siblings
    measured_s: float | None = None  # the load's seconds within estimate_s (None: estimate_s less the start cost per backend)
    team: str = ""  # whose share of the fleet it runs on (common/fairshare.py)
    priority: str = "normal"  # its class in the queues (common.fairshare.Priority)

    def measured(self) -> float:
        """The load's seconds the estimator's rate applies to."""
        if self.measured_s is not None:
            return self.measured_s
        return max(0.0, self.estimate_s - START_COST_S * len(self.backends))


@dataclass(frozen=True, slots=True)
class JobChange:
    """A job's current state as the placer's book reads it (leader/store/jobdocs.py makes it from a document)."""

    job_id: str
    state: str
    created_at: datetime  # aware, UTC
    owner: str
    split: bool  # a split job: never placed itself, its parts are
    follower_id: str | None
    estimate_s: float  # the follower-corrected estimate an active job adds to its follower's load
    dispatched: bool
    part_of: str | None
    queued: QueuedJob  # what placement needs, should the job be queued
