"""The job spec: one pydantic model validates the YAML, the REST body, the Celery payload and the Mongo document."""

from __future__ import annotations

import math
import re
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import (
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from common.base import NAME_PATTERN, VERSION_PATTERN, StrictModel
from common.devices import GPU_PROVIDERS
from common.fairshare import Priority
from common.spec.colocate import ColocateSpec
from common.spec.llm import LlmWorkload
from common.spec.load import DEFAULT_BLOCK_TOKENS, LoadSpec, Pattern, SearchSpec, Stability
from common.spec.network import NetworkSpec
from common.spec.quality import QualitySpec
from common.spec.server import MAX_BATCH, ServerOptions, conversion_problem
from common.spec.slo import SLO
from common.spec.sweep import configurations
from common.spec.target import ENDPOINT, TargetSpec, default_backends
from common.tensors import check_shape

# A follower's labels (zone, network, host class, ...) and a job's wanted ones: short names and values.
LabelText = Annotated[str, Field(pattern=NAME_PATTERN)]
Labels = Annotated[dict[LabelText, LabelText], Field(max_length=32)]

# Upper bounds of the grid and the document (the load's are common.spec.load's).
MAX_POINTS = 512
MAX_SPEC_BYTES = 256 * 1024

BackendName = Literal[
    "onnxruntime", "torchscript", "triton", "tfserving", "vllm", "sglang", "triton-openai", "llamacpp", "endpoint"
]
# Backends that serve language models (format "hf") over an OpenAI-compatible API; the others serve tensors (KServe v2).
LLM_BACKENDS = frozenset({"vllm", "sglang", "triton-openai", "llamacpp"})
# Backends whose servers run code a model carries (a TorchScript forward(), a SavedModel's graph): a follower runs
# them sandboxed, or only for models an admin marked trusted (follower/host/sandbox.py).
MODEL_CODE_BACKENDS = frozenset({"torchscript", "tfserving"})
KNOWN_BACKENDS: tuple[str, ...] = ("onnxruntime", "torchscript", "triton", "tfserving")


class ModelRef(StrictModel):
    """A model in the repository: `name:version`, or `name` for the latest version."""

    ref: str
    """`name:version`, or `name` for the latest version."""

    @model_validator(mode="before")
    @classmethod
    def _from_string(cls, value: Any) -> Any:
        # YAML writes `model: resnet50:1`; the stored form is {"ref": "resnet50:1"}. Accept both.
        return {"ref": value} if isinstance(value, str) else value

    @field_validator("ref")
    @classmethod
    def _check_ref(cls, value: str) -> str:
        name, _, version = value.partition(":")
        if not re.fullmatch(NAME_PATTERN, name):
            raise ValueError("must be name or name:version (letters, digits, . _ -)")
        if version and not re.fullmatch(VERSION_PATTERN, version):
            raise ValueError("version must be letters, digits, . _ -")
        return value

    @property
    def name(self) -> str:
        return self.ref.partition(":")[0]

    @property
    def version(self) -> str | None:
        """The pinned version, or None for the latest."""
        return self.ref.partition(":")[2] or None


class DataRef(StrictModel):
    """Request data: synthetic from the signature, a sample image shipped with scikit-image, or an uploaded set."""

    source: Literal["synthetic", "sample_images", "upload"] = "synthetic"
    """Where request bodies come from: synthetic tensors from the model's signature, scikit-image's sample images, or an
    uploaded data set."""
    id: Annotated[str, Field(pattern=r"^[A-Za-z0-9]{1,64}$")] | None = None
    """The uploaded data set's id."""
    preprocess: Annotated[str, Field(pattern=r"^[a-z0-9_]{1,64}$")] | None = None
    """A registered processor name, run on each request's data (`processing` says where)."""
    postprocess: Annotated[str, Field(pattern=r"^[a-z0-9_]{1,64}$")] | None = None
    """A registered processor name, run on each answer."""
    processing: Literal["client", "server"] = "client"
    """Where the processors run: on the follower before the run (client) or in the server, per request (server)."""

    @model_validator(mode="after")
    def _server_side_needs(self) -> DataRef:
        # Refused at submission rather than failing on the follower.
        if self.processing == "server":
            if self.preprocess is None and self.postprocess is None:
                raise ValueError("processing: server needs a preprocess or postprocess processor to run on the server")
            if self.preprocess is not None and self.source == "synthetic":
                raise ValueError(
                    "server-side preprocess needs raw request data (source: sample_images or upload), not synthetic tensors"
                )
        return self

    @model_validator(mode="after")
    def _id_for_upload(self) -> DataRef:
        if (self.source == "upload") != (self.id is not None):
            raise ValueError("id is required with source: upload, and only then")
        return self


class ExpectedTensor(StrictModel):
    """An input the job expects the model to take; checked against the model before any server starts."""

    name: str
    """The input's name."""
    datatype: str
    """Its KServe datatype, e.g. FP32."""
    shape: list[int]
    """Its shape; -1 for a dynamic dimension."""

    @model_validator(mode="after")
    def _bounded(self) -> ExpectedTensor:
        check_shape(self.name, self.shape)
        return self


class Requires(StrictModel):
    """Hardware a follower must have to run the job; a job nobody can run stays queued with the reason."""

    gpu: bool = False
    """Only a follower with a GPU runs the job (implied by a GPU server configuration)."""
    gpu_model: Annotated[str, Field(min_length=1, max_length=128)] | None = None
    """Only a GPU whose name holds this (case-insensitive), e.g. H100."""
    min_gpu_memory_mb: Annotated[int, Field(gt=0)] | None = None
    """At least this much GPU memory, in MiB."""
    follower: Annotated[str, Field(pattern=NAME_PATTERN)] | None = None
    """Only this follower runs the job (a fleet check pins one job to each follower); it waits while that one is away."""
    labels: Labels = {}
    """Only a follower carrying every one of these labels, e.g. {zone: a, network: 25g} (a follower's labels are set
    by BENCHFLEET_FOLLOWER_LABELS)."""

    @property
    def needs_gpu(self) -> bool:
        """Asking for a GPU model or GPU memory implies asking for a GPU."""
        return self.gpu or self.gpu_model is not None or self.min_gpu_memory_mb is not None


class SplitSpec(StrictModel):
    """Run a large grid as parts on several followers of one hardware class, merged back into one result."""

    max_parts: Annotated[int, Field(ge=2, le=64)]
    """At most this many parts (fewer when there are fewer points)."""
    min_points: Annotated[int, Field(ge=1)] = 1
    """Points per part at least; a grid below 2 x min_points is not split."""


MAX_REPEATS = 20


class RepeatSpec(StrictModel):
    """Run every point of the grid `count` times, interleaved with the job's other points, to show how repeatable each
    point is wherever it ran; `fresh_server` restarts each backend's server for every round (its cold start included).
    `repeats: 3` is short for `repeats: {count: 3}`."""

    count: Annotated[int, Field(ge=1, le=MAX_REPEATS)] = 1
    """Runs of every point."""
    fresh_server: bool = False
    """Restart each backend's server for every round, so every run includes its cold start."""

    @model_validator(mode="before")
    @classmethod
    def _from_count(cls, data: Any) -> Any:
        return {"count": data} if isinstance(data, int) and not isinstance(data, bool) else data


class JobSpec(StrictModel):
    """A benchmark submission; lists in it form a grid of benchmark points."""

    name: Annotated[str, Field(pattern=NAME_PATTERN)]
    """The job's name."""
    model: ModelRef
    """The model in the repository: `name:version`, or `name` for its latest version."""
    backends: Annotated[list[BackendName], Field(min_length=1)] = ["onnxruntime"]
    """The serving systems to run; each gets every point of the grid."""
    batch_sizes: Annotated[list[Annotated[int, Field(gt=0, le=MAX_BATCH)]], Field(min_length=1)] = [1]
    """Inputs per request; one point per batch size."""
    load: LoadSpec
    """How load is offered."""
    slo: SLO | None = None
    """The latency objectives every point is judged against."""
    seed: Annotated[int, Field(ge=0, lt=2**32)] = 0
    """The seed of every random draw (arrival times, synthetic data, sampled lengths): the same seed gives the same
    schedule."""
    server: ServerOptions = ServerOptions()
    """How the serving system is configured."""
    data: DataRef = DataRef()
    """The request data."""
    inputs: list[ExpectedTensor] | None = None
    """Inputs the model must take, checked against the stored model at submission."""
    requires: Requires = Requires()
    """Hardware a follower must have."""
    priority: Priority = "normal"
    """Its class in the queues: urgent (admins only) runs before normal, batch after (common/fairshare.py)."""
    split: SplitSpec | None = None
    """Opt-in: the grid's points split into parts run by several followers."""
    repeats: RepeatSpec = RepeatSpec()
    """Run every point this many times (a number, or `{count, fresh_server}`)."""
    llm: LlmWorkload | None = None
    """A language model's requests (an LLM backend; default LlmWorkload() there)."""
    network: NetworkSpec | None = None
    """Network conditions between the load generator and the server (a profile: lan, wifi, 4g, or custom figures)."""
    colocate: ColocateSpec | None = None
    """Other models served beside this one on the same host: each measured alone and beside each other (the
    interference matrix)."""
    target: TargetSpec | None = None
    """An endpoint already running, benchmarked as it is (no server started; backends: [endpoint])."""
    audit: Literal["off", "wire"] = "off"
    """`wire`: each point also captures its own connections with the kernel's packet timestamps and reports the
    client's error against the wire (send and receive overheads, and TTFT, ITL and latency on the wire beside the
    client's). Needs CAP_NET_RAW on the follower and plain HTTP; otherwise the point says why it was not audited."""
    propagate_trace: bool = False
    """Send every request a W3C `traceparent` header naming its point's span (as GuideLLM does), so a server
    instrumented with OpenTelemetry puts its own spans in the job's trace. The job's trace exists whether or not this
    is set; spans are exported where the leader and followers are configured to (OTEL_EXPORTER_OTLP_ENDPOINT)."""
    quality: QualitySpec | None = None
    """How good the answers are, checked on every point after its load (accuracy against the request data's labels)."""
    sweep: dict[str, list[Any]] | None = None
    """Server options to sweep: an option path (threads, llm.max_num_seqs, dynamic_batching.max_queue_delay_us, ...)
    to the values to try; every combination is a configuration with its own server start, crossed with the grid."""

    @field_validator("sweep")
    @classmethod
    def _check_sweep(cls, value: dict[str, list[Any]] | None, info: ValidationInfo) -> dict[str, list[Any]] | None:
        if value is None:
            return value
        if info.data.get("target") is not None or info.data.get("colocate") is not None:
            raise ValueError("sweeps the options of the server benchfleet starts: not with a target or colocate")
        configurations(value, info.data.get("server") or ServerOptions())
        return value

    @model_validator(mode="before")
    @classmethod
    def _target_backend(cls, data: Any) -> Any:
        return default_backends(data)

    @model_validator(mode="before")
    @classmethod
    def _gpu_server_needs_gpu(cls, data: Any) -> Any:
        # A server configured for a GPU can only run on a follower with one: say so in `requires`, which placement
        # reads, rather than letting the job land on a CPU-only follower and fail there.
        if not isinstance(data, dict) or not isinstance(data.get("server"), dict):
            return data
        server = data["server"]
        device, provider = server.get("device", "cpu"), server.get("execution_provider")
        # Either may be of any type here (the fields' own validation names what is wrong with them later).
        if not (isinstance(device, str) and device.startswith("cuda")) and not (
            isinstance(provider, str) and provider in GPU_PROVIDERS
        ):
            return data
        requires = data.get("requires") if data.get("requires") is not None else {}
        if not isinstance(requires, dict):
            return data
        if requires.get("gpu") is False:
            raise ValueError(
                "requires.gpu: false contradicts a server configured for a GPU (server.device or server.execution_provider)"
            )
        return {**data, "requires": {**requires, "gpu": True}}

    @field_validator("backends", "batch_sizes")
    @classmethod
    def _unique(cls, value: list[Any]) -> list[Any]:
        if len(set(value)) != len(value):
            raise ValueError("must not repeat an entry")
        return value

    @field_validator("data")
    @classmethod
    def _server_processing_backends(cls, value: DataRef, info: ValidationInfo) -> DataRef:
        # Only servers that run benchfleet's own code can run its processors (see SERVER_PROCESSING_BACKENDS).
        if value.processing == "server":
            unable = [b for b in info.data.get("backends") or [] if b not in SERVER_PROCESSING_BACKENDS]
            if unable:
                why = "; ".join(NO_SERVER_PROCESSING.get(b, b) for b in unable)
                raise ValueError(
                    f"processing: server is not supported by {', '.join(unable)} ({why}); "
                    "use processing: client or drop those backends"
                )
        return value

    @model_validator(mode="after")
    def _search_needs_slo(self) -> JobSpec:
        if self.load.search is not None and (self.slo is None or not (self.slo.percentiles or self.slo.per_request)):
            raise ValueError("load.search needs an slo to search against (p99_ms, or for a language model ttft_ms/tpot_ms)")
        return self

    @model_validator(mode="after")
    def _sessions_load(self) -> JobSpec:
        sessions = self.llm.sessions if self.llm is not None else None
        if sessions is not None and (why := self.load.refuses_sessions(self.target, sessions.from_trace)):
            raise ValueError(why)
        return self

    @model_validator(mode="after")
    def _llm_needs_llm_backend(self) -> JobSpec:
        if self.target is not None or (ENDPOINT in self.backends and self.target is None):
            if self.target is None:
                raise ValueError(f"backend {ENDPOINT} drives an endpoint already running: it needs a target")
            return self
        if self.llm is not None and not any(b in LLM_BACKENDS for b in self.backends):
            named = ", ".join(sorted(LLM_BACKENDS))
            raise ValueError(f"llm describes a language model's requests: it needs an LLM backend ({named})")
        if "sglang" in self.backends and self.server.llm.kv_cache_gb is not None:
            raise ValueError(
                "server.llm.kv_cache_gb sizes vLLM's KV cache in bytes; SGLang sizes its own as a memory share "
                "(leave it unset for sglang)"
            )
        if "llamacpp" in self.backends:
            llm = self.server.llm
            if llm.kv_cache_gb is not None:
                raise ValueError(
                    "server.llm.kv_cache_gb sizes vLLM's KV cache; llama.cpp sizes its own from the context (leave it unset)"
                )
            if llm.chunked_prefill is not None:
                raise ValueError(
                    "server.llm.chunked_prefill: llama.cpp always prefills in batches of max_num_batched_tokens beside the "
                    "decodes (leave it unset; set max_num_batched_tokens)"
                )
        return self

    @field_validator("colocate")
    @classmethod
    def _colocation_measures_one_configuration(cls, value: ColocateSpec | None, info: ValidationInfo) -> ColocateSpec | None:
        if value is not None:  # the fields before it, as validated (a field that failed is absent: its own error says why)
            value.check_job(info.data, llm_backends=LLM_BACKENDS)
        return value

    @field_validator("target")
    @classmethod
    def _target_starts_nothing(cls, value: TargetSpec | None, info: ValidationInfo) -> TargetSpec | None:
        if value is not None:
            value.check_job(info.data)
        return value

    @field_validator("audit")
    @classmethod
    def _audit_reads_plain_http(cls, value: str, info: ValidationInfo) -> str:
        target = info.data.get("target")
        scheme = urlsplit(target.url).scheme if target is not None else "http"
        if value == "wire" and scheme != "http":
            raise ValueError(f"a wire audit reads HTTP/1.1 off the wire; the target's {scheme}:// cannot be read (drop audit)")
        return value

    @field_validator("quality")
    @classmethod
    def _quality_for_the_model(cls, value: QualitySpec | None, info: ValidationInfo) -> QualitySpec | None:
        if value is None:  # the fields before it, as validated
            return None
        llm, data = info.data.get("llm"), info.data.get("data")
        return value.for_job(
            language=llm is not None or any(b in LLM_BACKENDS for b in info.data.get("backends") or []),
            uploaded=data is not None and data.source == "upload",
            prompt_set=llm is not None and llm.dataset is not None,
        )

    @model_validator(mode="after")
    def _conversions_where_served(self) -> JobSpec:
        if problem := conversion_problem(self.server, self.sweep or {}, self.backends, uploaded=self.data.source == "upload"):
            raise ValueError(problem)
        return self

    @model_validator(mode="after")
    def _grid_size(self) -> JobSpec:
        servers = math.prod(len(values) for values in (self.sweep or {}).values())
        n = len(self.backends) * servers * len(self.batch_sizes) * len(self.load.rates) * self.repeats.count
        if n > MAX_POINTS:
            raise ValueError(f"grid has {n} points (sweeps and repeats included); at most {MAX_POINTS} are allowed")
        return self


def load_label(pattern: str, rate: float, concurrency: int | None) -> str:
    """A point's load as a user reads it: its rate, or for a closed loop its users (a closed loop has no rate)."""
    if pattern == "closed":
        return f"{concurrency or 1} users"
    return f"{rate:g} req/s"


class PointSpec(StrictModel):
    """One benchmark point of a job's grid, as the follower runs it."""

    index: int
    backend: BackendName
    batch_size: int
    pattern: Pattern
    rate: float  # nominal rate (req/s); 0 for a closed loop
    duration_s: float
    warmup_s: float
    max_concurrency: int | None = None  # None: the cap follows the load (see LoadSpec.max_concurrency)
    seed: int
    # Shape of the load beyond the rate (defaults keep points stored before these existed valid).
    cap_policy: Literal["wait", "drop"] = "wait"
    busy_wait: bool = False
    cv: float = 1.0
    rate_end: float | None = None
    steps: int = 4
    # Co-location (common/spec/colocate.py): the model this point measures (0: the job's, k: colocate.models[k - 1]), the
    # models served at the same time, and the group of points that run at once (None: not co-located).
    served: int = 0
    beside: list[int] = []
    group: int | None = None
    spike_rate: float | None = None
    spike_at_s: float | None = None
    spike_duration_s: float = 1.0
    on_s: float = 1.0
    off_s: float = 1.0
    trace_s: list[float] | None = None
    trace_dataset: str | None = None  # an uploaded trace file (its id); the follower fetches and replays it
    trace_block_tokens: int = DEFAULT_BLOCK_TOKENS  # the tokens of each of its prefix blocks (a Mooncake trace's hash_ids)
    concurrency: int | None = None
    search: SearchSpec | None = None
    window_s: float = 1.0
    stability: Stability | None = None
    server: ServerOptions = ServerOptions()
    # With `repeats`: the configuration this point is a run of (its place in the grid without repeats; points of one
    # configuration differ only in their run and seed) and which run it is, from 0. Without: its index, and 0.
    config: int | None = None
    repeat: int = 0
    llm: LlmWorkload | None = None  # a language model's requests (the job's)
    audit: Literal["off", "wire"] = "off"  # the job's
    propagate_trace: bool = False  # the job's: each request carries the point span's traceparent

    @property
    def config_index(self) -> int:
        """The configuration this point is a run of (its own index on points stored before repeats existed)."""
        return self.index if self.config is None else self.config

    def load_label(self) -> str:
        """This point's load: its rate (sessions arriving, for LLM sessions), or its users for a closed loop."""
        sessions = self.llm is not None and self.llm.sessions is not None
        return f"{self.rate:g} sessions/s" if sessions else load_label(self.pattern, self.rate, self.concurrency)


# Backends whose server can run benchfleet's processors, and why the others cannot.
SERVER_PROCESSING_BACKENDS = frozenset({"onnxruntime", "torchscript", "triton"})
NO_SERVER_PROCESSING = {"tfserving": "TF Serving runs only the SavedModel graph, no benchfleet code"}
