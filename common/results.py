"""Measurement results: what a follower sends up for each benchmark point."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict

from common.spec import PointSpec


class Percentiles(BaseModel):
    """A latency distribution summary in milliseconds (HDR histogram, 3 significant digits)."""

    model_config = ConfigDict(extra="forbid")

    count: int
    mean: float
    p50: float
    p90: float
    p95: float
    p99: float
    p999: float
    max: float


class ColdStart(BaseModel):
    """Server cold start: process start → ready → first successful answer, in seconds."""

    model_config = ConfigDict(extra="forbid")

    to_ready_s: float
    to_first_answer_s: float


class Environment(BaseModel):
    """What the point ran on, so a result can be reproduced and compared."""

    model_config = ConfigDict(extra="forbid")

    follower_id: str
    host: str
    cpu_model: str
    cpu_count: int
    gpus: list[str]  # empty when no GPU exists
    python: str
    benchfleet: str
    backend_version: str
    seed: int


class PointResult(BaseModel):
    """One measured point. Latency counts from the *intended* send time; service time from the actual send."""

    model_config = ConfigDict(extra="forbid")

    point: PointSpec
    started_at: datetime
    measured_s: float
    requests: int
    ok: int
    errors: int
    error_sample: str | None = None
    offered_rate: float
    achieved_rate: float
    latency_ms: Percentiles | None
    service_ms: Percentiles | None
    send_lag_ms: Percentiles | None
    cold_start: ColdStart | None
    valid: bool
    invalid_reasons: list[str]
    slo_met: bool | None = None
    environment: Environment
