"""The attempt → point seam, typed: what an attempt asks of a server run (ServerRun), and what every point of that run
shares once the server answers (PointContext)."""

from __future__ import annotations

import platform
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import numpy as np

from common.formats.llmdata import PromptRow
from common.formats.traces import Trace
from common.spec.job import PointSpec
from common.spec.network import NetworkSpec
from common.spec.quality import QualitySpec
from common.spec.server import ServerOptions
from common.spec.slo import SLO
from common.spec.target import TargetSpec
from common.wire.models import ModelMeta
from common.wire.quality import Quality
from common.wire.results import Conversion, WindowStat
from follower.backends import Backend
from follower.host.hostinfo import PlatformRecord
from follower.host.sampler import SamplerConfig
from follower.host.wakeup import WakeupHold
from follower.link.leader_client import LeaderClient
from follower.loadgen.apart import Generators
from follower.loadgen.bodies import Samples
from follower.loadgen.calibrate import TargetCosts
from follower.loadgen.llmprompts import PromptMaker
from follower.loadgen.records import LoadRecords
from follower.loadgen.timing import Timer
from follower.loadgen.verdict import WindowSummary
from follower.protocols import NO_CREDENTIALS, Credentials, Endpoint
from follower.settings import MAX_IN_FLIGHT

READY_TIMEOUT_S = 120.0  # how long a model server may take to answer its readiness check
LLM_READY_TIMEOUT_S = 600.0  # a language-model server loads its weights and compiles first: minutes on a big model


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


@dataclass(frozen=True)
class HostFacts:
    """What every point result of this follower says of its host (follower/agent/main.py reads them once)."""

    follower_id: str = ""
    host: str = field(default_factory=platform.node)
    cpu_model: str = field(default_factory=lambda: platform.processor() or platform.machine())
    cpu_count: int = 0
    gpus: tuple[str, ...] = ()
    platform: PlatformRecord | None = None  # the reproducibility record's environment facts (hostinfo.platform_record)


class RecordsSink(Protocol):
    """Receives each point's raw per-request records and window summary (stage timings, generator CPU share); a search
    point's once per probe (`probe`: its place in the answer's probes) and once as the point's own (the chosen probe's)."""

    def __call__(self, point: PointSpec, records: LoadRecords, summary: WindowSummary, probe: int | None = None) -> None: ...


# Receives a point's closed windows as they close (live progress); called on the generator's thread.
ProgressSink = Callable[[PointSpec, list[WindowStat]], None]


@dataclass(frozen=True)
class ServerRun:
    """What an attempt asks of one server run, built once (follower/attempt/execute.py) and read by the runner and by
    every point: the model and where it works, what its points report to, the load's host settings, and what is
    driven (a server benchfleet starts, or a team's `target` with its `credentials`)."""

    model: ModelMeta
    model_path: Path
    workdir: Path
    host_facts: HostFacts = field(default_factory=HostFacts)
    slo: SLO | None = None
    ready_timeout_s: float | None = None  # None: READY_TIMEOUT_S, or LLM_READY_TIMEOUT_S for a language model
    timer: Timer = "yield"
    records_sink: RecordsSink | None = None  # each point's raw per-request records and window summary
    progress_sink: ProgressSink | None = None  # live progress
    sampling: SamplerConfig = field(default_factory=SamplerConfig)
    samples: Samples | None = None  # request data, by input name
    trace: Trace | None = None  # an uploaded trace the points replay
    prompt_rows: list[PromptRow] | None = None  # an uploaded prompt set's rows (llm.dataset)
    forced_generators: int | None = None
    wakeup_latency_us: int | None = 0  # held while the server runs (follower/host/wakeup.py); None: leave the host
    max_in_flight: int = MAX_IN_FLIGHT  # the bound of a cap that follows the load (the follower's setting)
    network: NetworkSpec | None = None  # the link to the server is shaped once it is ready (follower/host/netshape.py)
    cpus: frozenset[int] | None = None  # the server's cores (default: every server core of the plan)
    extra_env: Mapping[str, str] = field(default_factory=dict)  # more environment for the server
    writable: tuple[Path, ...] = ()  # directories the server may write besides its home (in its sandbox)
    target: TargetSpec | None = None  # an endpoint driven as it runs (backend `endpoint`): nothing is started
    credentials: Credentials = NO_CREDENTIALS  # a target's headers and TLS checks (target.secret, ca_bundle)
    shard: ShardLink | None = None  # this follower's share of every point of a sharded job (follower/point/shard.py)
    target_costs: TargetCosts | None = None  # where the generator's cost per request against a target is kept
    postprocess: str | None = None  # a client-side post-processor, timed on sample answers after each point
    labels: tuple[str, ...] | None = None  # the classes' labels it looks up (the data set's labels.txt)
    generators: Generators | None = None  # the open loop's own processes for the attempt's points (None: one a point)
    quality: QualitySpec | None = None  # the job's quality checks, run on each point's server after its load
    truth: np.ndarray | None = None  # each request-data sample's true class (its labels), for quality.accuracy
    targets: np.ndarray | None = None  # each sample's true values ([n, k]), for quality.regression
    # quality.agreement: the reference configuration (the job's first: backend, server options), and its answers' scores
    # by batch size once its points have scored them (filled by follower/point/quality.py as the attempt runs).
    reference: tuple[str, ServerOptions] | None = None
    reference_scores: dict[int, np.ndarray] = field(default_factory=dict)
    reference_tokens: list[list[str]] = field(default_factory=list)  # a language model's: its greedy completions
    llm_quality: dict[str, Quality] = field(default_factory=dict)  # a language model's figures by configuration
    gpu_gate: bool = False  # each point checks, as it starts and ends, that no foreign process uses a GPU (wait_for_gpu)

    @property
    def ready_limit_s(self) -> float:
        """How long the server may take to get ready: the follower's setting, else its kind's default."""
        if self.ready_timeout_s is not None:
            return self.ready_timeout_s
        return LLM_READY_TIMEOUT_S if self.model.is_llm else READY_TIMEOUT_S


@dataclass(frozen=True)
class PointContext:
    """One server run's fixed facts once it answers; plan, drive, judge and result read it, none changes it."""

    run: ServerRun
    backend: Backend
    endpoint: Endpoint  # where the load goes, and the protocol it speaks
    backend_version: str
    wakeup: WakeupHold | None = None
    prompts: PromptMaker | None = None  # a language model's tokenizer, for exact prompts and the client's token count
    cpu_per_request_s: float | None = None  # the generator's cost per request against this target (calibrated)
    conversion: Conversion | None = None  # the model as served was converted from the user's upload, with its check
