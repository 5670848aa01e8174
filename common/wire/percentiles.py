"""A latency distribution's summary, the shape every figure of the results shares."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Percentiles(BaseModel):
    """A latency distribution summary in milliseconds (HDR histogram, 3 significant digits)."""

    model_config = ConfigDict(extra="forbid")

    count: int
    mean: float | None  # None only on an imported point whose tool does not report it
    p50: float
    p90: float | None  # the same
    p95: float | None  # the same
    p99: float
    p999: float | None  # the same
    max: float | None
