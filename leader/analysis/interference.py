"""A co-location job's interference matrix (common/spec/colocate.py): each model's p99 and throughput alone, and beside
each other model, with the ratio to alone."""

from __future__ import annotations

from dataclasses import dataclass

from common.wire.jobs import JobView
from common.wire.results import PointResult


@dataclass(frozen=True)
class Cell:
    """One model measured alone (beside None) or beside another model."""

    model: str
    beside: str | None
    index: int  # the point
    p50_ms: float | None
    p99_ms: float | None
    achieved_rate: float
    valid: bool
    p99_ratio: float | None  # this p99 / the model's p99 alone
    rate_ratio: float | None  # this throughput / the model's throughput alone


@dataclass(frozen=True)
class Interference:
    """The matrix: rows are the models measured, columns alone and beside each model."""

    models: list[str]
    cpus: str
    mps: bool
    cells: list[Cell]

    def cell(self, model: str, beside: str | None) -> Cell | None:
        """The cell of `model` beside `beside` (None: alone), if measured."""
        return next((c for c in self.cells if c.model == model and c.beside == beside), None)


def matrix(job: JobView, points: list[PointResult]) -> Interference | None:
    """The job's matrix, or None when it is not a co-location job."""
    spec = job.spec.colocate
    if spec is None:
        return None
    names = [job.model_ref, *spec.models]
    alone = {p.point.served: p for p in points if not p.point.beside}

    def ratio(value: float | None, base: float | None) -> float | None:
        return value / base if value is not None and base else None

    cells = []
    for p in sorted(points, key=lambda p: p.point.index):
        base = alone.get(p.point.served)
        p99 = p.latency_ms.p99 if p.latency_ms else None
        cells.append(
            Cell(
                model=names[p.point.served],
                beside=names[p.point.beside[0]] if p.point.beside else None,
                index=p.point.index,
                p50_ms=p.latency_ms.p50 if p.latency_ms else None,
                p99_ms=p99,
                achieved_rate=p.achieved_rate,
                valid=p.valid,
                p99_ratio=ratio(p99, base.latency_ms.p99 if base is not None and base.latency_ms else None),
                rate_ratio=ratio(p.achieved_rate, base.achieved_rate if base is not None else None),
            )
        )
    return Interference(models=names, cpus=spec.cpus, mps=spec.mps, cells=cells)
