"""Plain values the stores hand the scheduler: no database types, so placement is pure and testable."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Candidate:
    """A follower that may take work: alive (ready or busy) and the backends it offers."""

    follower_id: str
    backends: frozenset[str]


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
