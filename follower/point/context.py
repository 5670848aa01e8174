"""What every point of one backend run shares, built once by the runner: the server, the model, the sinks, the host."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from common.llmdata import PromptRow
from common.models import ModelMeta
from common.results import WindowStat
from common.spec import SLO, PointSpec
from common.traces import Trace
from follower.backends import Backend
from follower.host.sampler import SamplerConfig
from follower.host.wakeup import WakeupHold
from follower.link.leader_client import LeaderClient
from follower.loadgen.bodies import Samples
from follower.loadgen.llmprompts import PromptMaker
from follower.loadgen.records import LoadRecords
from follower.loadgen.timing import Timer
from follower.loadgen.transports import NO_CREDENTIALS, Credentials
from follower.loadgen.verdict import WindowSummary


@dataclass(frozen=True)
class ShardLink:
    """A sharded job's attempt as its points see it: this follower drives shard `index` of `count` of job `job_id`
    (its own attempt `attempt`), through the leader `client` (the barrier, the records, the clock)."""

    client: LeaderClient
    job_id: str
    index: int
    count: int
    attempt: int
    follower_id: str


# Receives each point's raw per-request records and window summary (stage timings, generator CPU share).
RecordsSink = Callable[[PointSpec, LoadRecords, WindowSummary], None]
# Receives a point's closed windows as they close (live progress); called on the generator's thread.
ProgressSink = Callable[[PointSpec, list[WindowStat]], None]


@dataclass(frozen=True)
class PointContext:
    """One backend run's fixed facts; plan, drive, judge and result read it, none changes it."""

    backend: Backend
    url: str
    model: ModelMeta
    env_base: Mapping[str, Any]
    slo: SLO | None
    backend_version: str
    timer: Timer = "yield"
    records_sink: RecordsSink | None = None
    progress_sink: ProgressSink | None = None
    sampling: SamplerConfig = field(default_factory=SamplerConfig)
    samples: Samples | None = None
    trace: Trace | None = None
    forced_generators: int | None = None
    wakeup: WakeupHold | None = None
    max_in_flight: int = 4096  # the bound of a cap that follows the load (the follower's setting)
    prompts: PromptMaker | None = None  # a language model's tokenizer, for exact prompts and the client's token count
    prompt_rows: list[PromptRow] | None = None  # an uploaded prompt set's rows (llm.dataset)
    credentials: Credentials = NO_CREDENTIALS  # a target's headers and TLS checks (a job's target.secret, ca_bundle)
    shard: ShardLink | None = None  # a sharded job's share of every point (target.shards)
    cpu_per_request_s: float | None = None  # the generator's cost per request against this target (calibrated)

    @property
    def wire(self) -> str:
        """The request dialect the backend speaks."""
        return backend_wire(self.backend)


def backend_wire(backend: Backend) -> str:
    """The request dialect a backend speaks (KServe v2 unless it says otherwise, as TF Serving does; gRPC if asked)."""
    server = getattr(backend, "server", None)
    if getattr(server, "protocol", "http") == "grpc":
        return "grpc"
    return str(getattr(backend, "wire", "kserve"))
