"""Co-location: several models served at once on one host, each measured alone and beside each other one.

A job with `colocate` measures one configuration (one backend, batch size and rate) for the job's model and each
model named here. Its points are: every model alone, then for every pair of models both at once (two points of one
group: each model's server takes its own load while the other's does). The leader reads them back as the
interference matrix: each model's p99 and throughput alone and beside each other model (leader/analysis/interference.py).

Models are numbered 0 (the job's own) and 1..n (`colocate.models` in order); a point's `served` and `beside` use that
numbering.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from common.base import StrictModel

MAX_COLOCATED = 3  # models beside the job's own: 4 models give 4 alone runs and 6 pairs


class ColocateSpec(StrictModel):
    """Serve other models beside the job's model on the same host: each is measured alone and beside each other one,
    and the job reports the interference matrix (one backend, batch size and rate)."""

    models: Annotated[list[Annotated[str, Field(min_length=1, max_length=100)]], Field(min_length=1, max_length=MAX_COLOCATED)]
    """The other models, name:version (or name for the latest), served with the job's backend."""
    cpus: Literal["shared", "split"] = "shared"
    """shared: every server runs on all of the follower's server cores; split: the cores are divided among the servers
    running at once (each gets its own)."""
    mps: bool = False
    """GPU servers share the GPU through NVIDIA MPS (the follower starts and stops the control daemon); needs a GPU."""
    active_thread_percentage: list[Annotated[int, Field(ge=1, le=100)]] | None = None
    """MPS only: each server's share of the GPU's threads, the job's model first, then `models` in order."""

    @model_validator(mode="after")
    def _percentages(self) -> ColocateSpec:
        if self.active_thread_percentage is not None:
            if not self.mps:
                raise ValueError("active_thread_percentage applies to MPS only (mps: true)")
            if len(self.active_thread_percentage) != len(self.models) + 1:
                raise ValueError(
                    f"active_thread_percentage needs one share per model: {len(self.models) + 1} (the job's model first)"
                )
        if len(set(self.models)) != len(self.models):
            raise ValueError("models must not repeat an entry")
        return self

    def check_job(self, job: Mapping[str, Any], *, llm_backends: frozenset[str]) -> None:
        """ValueError unless the job (JobSpec's fields, validated) measures one configuration a co-location can run."""
        load, repeats, requires = job.get("load"), job.get("repeats"), job.get("requires")
        counts = (
            ("backends", len(job.get("backends") or [])),
            ("batch_sizes", len(job.get("batch_sizes") or [])),
            ("load.rate", len(load.rates) if load is not None else 1),
            ("repeats", repeats.count if repeats else 1),
        )
        many = [what for what, n in counts if n > 1]
        many += [
            what
            for what, on in (
                ("load.search", load.search if load is not None else None),
                ("split", job.get("split")),
                ("network", job.get("network")),
            )
            if on is not None
        ]
        if many:
            raise ValueError(f"colocate measures one configuration (one backend, batch size and rate), without {', '.join(many)}")
        data = job.get("data")
        if data is not None and data.source != "synthetic":
            raise ValueError("colocate sends each model synthetic requests from its own signature (data.source: synthetic)")
        if (job.get("backends") or [""])[0] in llm_backends:
            raise ValueError("colocate serves tensor models (a language model server sizes its own memory)")
        if self.mps and not (requires is not None and requires.needs_gpu):
            raise ValueError("colocate.mps shares a GPU: set requires.gpu (or a GPU server configuration)")


def runs(n_models: int) -> list[tuple[int, ...]]:
    """What runs at once, in order: each model alone, then each pair."""
    return [(m,) for m in range(n_models)] + list(itertools.combinations(range(n_models), 2))


def server_starts(n_models: int) -> int:
    """Servers started over the job: one per model in each run."""
    return sum(len(run) for run in runs(n_models))
