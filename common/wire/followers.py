"""What a follower tells the leader about itself, and how the leader shows it."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictFloat

from common.base import NAME_PATTERN
from common.spec.job import Labels
from common.wire.analysis import Anomaly
from common.wire.compat import WIRE

FollowerState = Literal["ready", "busy", "draining", "missing", "pending"]  # pending: awaiting an admin's approval


class GpuInfo(BaseModel):
    """One GPU as NVML reports it."""

    model_config = ConfigDict(extra="forbid")

    index: int
    name: str
    memory_mb: int
    uuid: str | None = None


class ClockOffset(BaseModel):
    """A follower's clock against the leader's: the leader's minus its own, from the fastest of several round trips,
    with half that round trip as the uncertainty (sharded points start at one leader instant through it)."""

    model_config = ConfigDict(extra="forbid")

    offset_ms: float
    uncertainty_ms: Annotated[float, Field(ge=0)]


class FollowerInfo(BaseModel):
    """Registration: host capabilities and the incarnation (one per agent process start)."""

    model_config = ConfigDict(extra="forbid")

    follower_id: Annotated[str, Field(pattern=NAME_PATTERN)]
    incarnation: Annotated[str, Field(min_length=8, max_length=64)]
    host: str
    cpu_model: str
    cpu_count: int
    memory_mb: int
    gpus: list[GpuInfo]  # empty: no GPU (NVML absent or no device), never faked
    backends: list[str]
    version: str  # its benchfleet release
    wire: int = WIRE  # the leader/follower contract it speaks (common/wire/compat.py)
    # Backends this agent runs only for models an admin marked trusted: those that run a model's code
    # (common.spec.job.MODEL_CODE_BACKENDS), on a host where model servers cannot be sandboxed.
    trusted_only: list[str] = []
    # The qdiscs this agent can shape its servers' links with ("netem": delay, jitter, loss; "tbf": rate), and why
    # not where it cannot (follower/host/netshape.py); placement sends a job's `network` only where it can.
    network_shaping: list[str] = []
    labels: Labels = {}  # what the operator says of this host (zone, network, host class); jobs ask for them
    network_shaping_note: str | None = None
    # The load generator's capacity: its cores, and the CPU one request costs it (what it learned, else its prior);
    # the leader sizes a sharded point's followers from them and refuses one the fleet cannot drive.
    generator_cores: int = 1
    cpu_per_request_us: float | None = None
    clock: ClockOffset | None = None  # measured at registration (None: the leader's clock did not answer)
    # Generator CPU per request (us) against each target it calibrated (`protocol url`), where it differs from the
    # general figure above; the leader sizes a sharded job against a target from it.
    target_costs_us: Annotated[dict[str, StrictFloat], Field(max_length=256)] = {}


class HeldJob(BaseModel):
    """A job attempt the follower holds in its local queue (or runs now), with the estimate it orders by."""

    model_config = ConfigDict(extra="forbid")

    job_id: str
    attempt: int
    estimate_s: float
    running: bool = False


class Heartbeat(BaseModel):
    """Sent every HEARTBEAT_INTERVAL_S; state is what the agent is doing now."""

    model_config = ConfigDict(extra="forbid")

    incarnation: str
    state: Literal["ready", "busy"]
    running_job: str | None = None
    held: Annotated[list[HeldJob], Field(max_length=10_000)] = []
    waiting_reason: Annotated[str, Field(max_length=500)] | None = None  # why held jobs do not start (GPU in use, CPU busy)
    clock: ClockOffset | None = None  # measured again every few beats (None: not this beat)
    target_costs_us: Annotated[dict[str, StrictFloat], Field(max_length=256)] | None = None  # with the clock, when measured


class Leaving(BaseModel):
    """An agent stopping (SIGTERM): the leader takes back every job it holds or runs, at once, as new attempts."""

    model_config = ConfigDict(extra="forbid")

    incarnation: str


class HeartbeatReply(BaseModel):
    """known=False asks the follower to register again; cancel names held or running jobs to drop and stop."""

    known: bool
    cancel: list[str] = []


class FollowerView(BaseModel):
    """A follower as the API lists it."""

    info: FollowerInfo
    state: FollowerState
    last_seen: datetime
    registered_at: datetime
    running_job: str | None = None
    held: list[HeldJob] = []
    waiting_reason: str | None = None
    anomaly: Anomaly | None = None  # marked by the last fleet check that found it anomalous (cleared by a clean one)
    clock: ClockOffset | None = None  # its latest clock offset to the leader (registration, then heartbeats)
    target_costs_us: dict[str, float] = {}  # its generator's cost per request against each target it calibrated
    release_note: str | None = None  # a compatible follower of another release than the leader's, said so


class FollowerRegistration(FollowerView):
    """The reply to registration: the follower, and its own credential when it joined with the join token.

    The agent uses the credential for every later call; it is shown only here and stored only as a hash.
    """

    credential: str | None = None
    # host:port of the leader's live-progress gRPC server (None: off); host may be empty (use the leader URL's host).
    telemetry_address: str | None = None
