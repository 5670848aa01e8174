"""The follower's settings: one object per process, from BENCHFLEET_FOLLOWER_* variables."""

from __future__ import annotations

import re
import socket
from pathlib import Path
from typing import Annotated, Literal

from pydantic import AliasChoices, Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from common.fairshare import AGEING_PER_S, WAIT_BOUND
from common.spec.job import Labels
from common.wire.messaging import HEARTBEAT_INTERVAL_S

# The bound of an in-flight cap that follows the load, unless the follower's settings say otherwise.
MAX_IN_FLIGHT = 4096


def default_follower_id() -> str:
    """A stable id from the host name, so a restarted agent keeps its queue."""
    return re.sub(r"[^A-Za-z0-9._-]", "-", socket.gethostname())[:64] or "follower"


class FollowerSettings(BaseSettings):
    """Where the leader and the broker are, who this follower is, where it keeps its files."""

    model_config = SettingsConfigDict(
        env_prefix="BENCHFLEET_FOLLOWER_", extra="ignore", hide_input_in_errors=True, env_parse_none_str="none"
    )

    leader_url: str = "http://127.0.0.1:8700"
    # With an https:// leader: the CA (PEM) its certificate is checked against (unset: the system's); the live-progress
    # gRPC channel then uses TLS too, checked against the same CA.
    leader_ca_file: Path | None = None
    token: SecretStr = Field(min_length=16)
    redis_url: str = Field(
        default="redis://127.0.0.1:6379/0",
        validation_alias=AliasChoices("BENCHFLEET_FOLLOWER_REDIS_URL", "BENCHFLEET_REDIS_URL", "redis_url"),
    )
    follower_id: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")] = Field(default_factory=default_follower_id)
    work_dir: Path = Path(".benchfleet/follower")
    backends: list[str] | None = None  # None: every backend this host can run
    # What this host is, for placement: BENCHFLEET_FOLLOWER_LABELS='{"zone": "a", "network": "25g"}' (JSON).
    labels: Labels = {}
    heartbeat_interval_s: float = Field(default=HEARTBEAT_INTERVAL_S, gt=0)
    # How long a model server may take to answer its readiness check (None: 120 s; 600 s for a language-model server,
    # which loads its weights and compiles first).
    server_ready_timeout_s: float | None = Field(default=None, gt=0)
    # Tier 2: the order held jobs run in (sjf: shortest estimate first with ageing; fcfs: the baseline), and the
    # ageing rate: seconds of estimate forgiven per second waited (a job waiting estimate/ageing seconds runs next).
    order: Literal["sjf", "fcfs"] = "sjf"
    ageing_per_s: float = Field(default=AGEING_PER_S, ge=0)
    # A held job that has waited this many times its FCFS turnaround runs next (0: no bound; follower/agent/holding.py).
    wait_bound: float = Field(default=WAIT_BOUND, ge=0)
    # Do not start a job while a foreign process uses a GPU, or while host CPU is above this percentage (None: off).
    wait_for_gpu: bool = True
    max_host_cpu_percent: float | None = Field(default=None, gt=0, le=100)
    # The fleet's services besides the leader, the broker and this follower's own ports (comma-separated host:port, e.g.
    # the database's): no target may be one of them, whatever a team's allow-list opens (common/egress.py).
    fleet_services: str = ""
    # Prometheus /metrics: loopback by default (set 0.0.0.0 in a pod so Prometheus can scrape); port -1 disables it.
    metrics_host: str = "127.0.0.1"
    metrics_port: int = Field(default=9701, ge=-1, lt=65536)
    # An on-demand pod's agent (leader/placement/ondemand.py): it runs the one job it was started for, then exits.
    exit_after_job: bool = False
    # Resource sampler: its period (>= 10 Hz), and the figures that turn usage into CO2 and cost per 1M requests
    # (None: not configured, those fields stay absent). Grid intensity in g CO2 per kWh; price per instance hour.
    # Live progress: the leader's gRPC address (host:port) if set, else the one the leader gives at registration.
    telemetry_address: str | None = None
    sample_interval_s: float = Field(default=0.08, gt=0, le=0.1)
    # Generator processes per open-loop point. None: decided from the target rate and the measured CPU per request,
    # at most one per generator core. N: exactly N, even where they share cores (the plan still marks a point whose
    # rate needs more cores than the generator has as saturated).
    generators: int | None = Field(default=None, ge=1, le=64)
    # The most requests a point whose spec sets no max_concurrency may have in flight (its cap follows the load up
    # to this); a spec's own max_concurrency is used as it is.
    max_in_flight: int = Field(default=MAX_IN_FLIGHT, ge=1, le=65536)
    # While a job's points run, hold the CPUs' wake-up latency at this many µs through PM QoS (follower/host/wakeup.py):
    # 0 keeps idle CPUs polling instead of halting, which removed most of the send lag and run-to-run spread on a
    # VM. "none" leaves the host's idle policy alone.
    cpu_wakeup_latency_us: int | None = Field(default=0, ge=0, le=2_000_000_000)
    grid_g_co2_per_kwh: float | None = Field(default=None, ge=0)
    instance_price_per_hour: float | None = Field(default=None, ge=0)

    @field_validator("leader_ca_file")
    @classmethod
    def _ca_exists(cls, value: Path | None) -> Path | None:
        if value is not None and not value.is_file():
            raise ValueError(f"no file at {value}")
        return value

    @field_validator("work_dir")
    @classmethod
    def _absolute(cls, value: Path) -> Path:
        # Model servers run in another directory (the sandbox's): every path handed to them must be absolute.
        return value.absolute()

    @field_validator("leader_url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError("must be an http:// or https:// URL")
        return value.rstrip("/")

    @property
    def cache_dir(self) -> Path:
        return self.work_dir / "models"

    @property
    def held_dir(self) -> Path:
        return self.work_dir / "held"

    @property
    def target_costs_path(self) -> Path:
        """The generator's calibrated cost per request against each target (follower/loadgen/calibrate.py)."""
        return self.work_dir / "target-costs.json"

    @property
    def jobs_dir(self) -> Path:
        return self.work_dir / "jobs"
