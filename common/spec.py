"""The job spec: one pydantic model validates the YAML, the REST body, the Celery payload and the Mongo document."""

from __future__ import annotations

import math
import re
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from common.devices import GPU_PROVIDERS
from common.errors import InvalidSpec

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"
VERSION_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,31}$"

# Upper bounds that keep one submission from occupying a follower for days (configurable limits come later).
MAX_RATE = 100_000.0
MAX_DURATION_S = 3_600.0
MAX_BATCH = 4_096
MAX_POINTS = 512
MAX_SPEC_BYTES = 256 * 1024

BackendName = Literal["onnxruntime", "torchscript", "triton", "tfserving"]
KNOWN_BACKENDS: tuple[str, ...] = ("onnxruntime", "torchscript", "triton", "tfserving")

_DURATION_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


def parse_duration(value: Any) -> float:
    """Turn `10s`, `500ms`, `2m`, `1h` or a bare number of seconds into seconds."""
    if isinstance(value, bool):
        raise ValueError("must be a duration such as 10s, 500ms or 2m")
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        match = _DURATION_RE.match(value)
        if match:
            return float(match.group(1)) * _UNIT_S[match.group(2)]
    raise ValueError("must be a duration such as 10s, 500ms or 2m")


Seconds = Annotated[float, BeforeValidator(parse_duration)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ModelRef(_Strict):
    """A model in the repository: `name:version`, or `name` for the latest version."""

    ref: str

    @model_validator(mode="before")
    @classmethod
    def _from_string(cls, value: Any) -> Any:
        # YAML writes `model: resnet50:1`; the stored form is {"ref": "resnet50:1"}. Accept both.
        return {"ref": value} if isinstance(value, str) else value

    @field_validator("ref")
    @classmethod
    def _check_ref(cls, value: str) -> str:
        name, _, version = value.partition(":")
        if not re.match(NAME_PATTERN, name):
            raise ValueError("must be name or name:version (letters, digits, . _ -)")
        if version and not re.match(VERSION_PATTERN, version):
            raise ValueError("version must be letters, digits, . _ -")
        return value

    @property
    def name(self) -> str:
        return self.ref.partition(":")[0]

    @property
    def version(self) -> str | None:
        """The pinned version, or None for the latest."""
        return self.ref.partition(":")[2] or None


Pattern = Literal["poisson", "constant", "gamma", "ramp", "step", "spike", "onoff", "trace", "closed"]
PATTERNS: tuple[str, ...] = ("poisson", "constant", "gamma", "ramp", "step", "spike", "onoff", "trace", "closed")
# Patterns whose arrivals follow a rate that changes over the run (an inhomogeneous Poisson process).
MODULATED: tuple[str, ...] = ("ramp", "step", "spike", "onoff")
MAX_TRACE_ENTRIES = 20_000
MAX_CONCURRENCY = 4096


def _check_rate_value(item: Any) -> float:
    if isinstance(item, bool) or not isinstance(item, int | float):
        raise ValueError(f"must be a number of requests per second, got {item!r}")
    if not item > 0:
        raise ValueError("must be > 0")
    if item > MAX_RATE:
        raise ValueError(f"must be <= {MAX_RATE:g}")
    return float(item)


class SearchSpec(_Strict):
    """Binary search for the highest rate that is valid and meets the SLO, between `low` and `high` req/s."""

    low: Annotated[float, Field(gt=0, le=MAX_RATE)] = 10.0
    high: Annotated[float, Field(gt=0, le=MAX_RATE)] = 1000.0
    precision: Annotated[float, Field(gt=0, lt=1)] = 0.05  # stop when (high - low) / high falls below this
    max_steps: Annotated[int, Field(ge=1, le=20)] = 8

    @model_validator(mode="after")
    def _ordered(self) -> SearchSpec:
        if self.low >= self.high:
            raise ValueError("search.low must be below search.high")
        return self


class TraceRef(_Strict):
    """A trace file uploaded as a data set of format `trace` (common.traces), replayed as the arrival schedule."""

    dataset: Annotated[str, Field(pattern=r"^[A-Za-z0-9]{1,64}$")]  # the data set's id (POST /api/v1/data)


# A p99 claim at 99% confidence needs >= 459 samples (MLPerf LoadGen): a point's minimum, and a stability window's.
P99_MIN_SAMPLES = 459
MAX_WINDOW_S = 60.0
# Patterns whose rate is steady, so rate x window is what a window holds.
STEADY_PATTERNS = ("poisson", "constant", "gamma")


class Stability(_Strict):
    """Accept a point when its last `windows` windows agree within `tolerance`; extend the run up to `max_duration`."""

    windows: Annotated[int, Field(ge=2, le=20)] = 3
    tolerance: Annotated[float, Field(gt=0, lt=1)] = 0.10
    max_duration: Annotated[Seconds, Field(gt=0, le=MAX_DURATION_S)] = 60.0


class LoadSpec(_Strict):
    """How load is offered: an open-loop arrival process (one rate, a ladder, or a search) or a closed loop."""

    pattern: Pattern = "poisson"
    search: SearchSpec | None = None
    # A scalar in YAML becomes a one-entry list (a ladder when several). Not used by trace, closed or search.
    rate: Annotated[list[float] | None, Field(validate_default=True)] = None
    duration: Annotated[Seconds, Field(gt=0, le=MAX_DURATION_S)] = 10.0
    warmup: Annotated[Seconds, Field(ge=0, le=MAX_DURATION_S)] = 2.0
    max_concurrency: Annotated[int, Field(gt=0, le=MAX_CONCURRENCY)] = 256
    # What an open-loop request due while max_concurrency are in flight does: wait (its wait counts as latency
    # from the intended time) or be dropped (counted and reported, and against the achieved rate).
    cap_policy: Literal["wait", "drop"] = "wait"
    cv: Annotated[float, Field(gt=0, le=20)] = 1.0  # gamma: coefficient of variation of the gaps (1 = Poisson)
    rate_end: Annotated[float | None, Field(validate_default=True)] = None  # ramp/step: the rate at the end
    steps: Annotated[int, Field(ge=1, le=100)] = 4  # step: how many equal steps from rate to rate_end
    spike_rate: Annotated[float | None, Field(validate_default=True)] = None  # spike: the rate during the spike
    spike_at: Annotated[Seconds, Field(ge=0, le=MAX_DURATION_S)] | None = None  # default: the middle of the run
    spike_duration: Annotated[Seconds, Field(gt=0, le=MAX_DURATION_S)] = 1.0
    on: Annotated[Seconds, Field(gt=0, le=MAX_DURATION_S)] = 1.0  # onoff: sending at `rate` for `on`...
    off: Annotated[Seconds, Field(gt=0, le=MAX_DURATION_S)] = 1.0  # ...then silent for `off`
    # trace: send offsets in seconds inline, or {dataset: ID} naming an uploaded trace file (checked at submission).
    trace: Annotated[list[float] | TraceRef | None, Field(validate_default=True)] = None
    concurrency: Annotated[list[int] | None, Field(validate_default=True)] = None  # closed: a ladder of users
    window: Annotated[Seconds, Field(gt=0, le=MAX_WINDOW_S)] = 1.0  # measurement window: stability, live progress
    stability: Stability | None = None

    @field_validator("stability")
    @classmethod
    def _check_stability_windows(cls, value: Stability | None, info: ValidationInfo) -> Stability | None:
        # The rule compares the windows' p99s: a window too small to hold a p99 claim compares its largest few
        # answers, which never agree, so the point would run to max_duration and be called unstable.
        rates, window = info.data.get("rate"), info.data.get("window")
        if value is None or info.data.get("pattern") not in STEADY_PATTERNS or not rates or not window:
            return value
        rate = min(rates)
        if rate * window < P99_MIN_SAMPLES:
            needed = math.ceil(10 * P99_MIN_SAMPLES / rate) / 10
            fix = (f"set load.window to at least {needed:g} s (or a higher rate)" if needed <= MAX_WINDOW_S else
                   f"windows are at most {MAX_WINDOW_S:g} s, so the rate must be at least "
                   f"{math.ceil(P99_MIN_SAMPLES / MAX_WINDOW_S)} req/s (or drop load.stability)")  # fmt: skip
            raise ValueError(
                f"a {window:g} s window at {rate:g} req/s holds ~{rate * window:.0f} requests; comparing p99s between "
                f"windows needs >= {P99_MIN_SAMPLES} each: {fix}"
            )
        return value

    @field_validator("rate", mode="before")
    @classmethod
    def _check_rate(cls, value: Any, info: ValidationInfo) -> list[float] | None:
        pattern, search = info.data.get("pattern"), info.data.get("search")
        if value is None:
            if pattern in ("trace", "closed") or search is not None:
                return None
            raise ValueError(f"field required for pattern {pattern!r}")
        if pattern in ("trace", "closed"):
            raise ValueError(f"must not be given for pattern {pattern!r}")
        if search is not None:
            raise ValueError("must not be given with search (the search chooses the rate)")
        values = value if isinstance(value, list) else [value]
        if not values:
            raise ValueError("must name at least one rate")
        out = [_check_rate_value(item) for item in values]
        if len(set(out)) != len(out):
            raise ValueError("must not repeat an entry")
        return out

    @field_validator("rate_end", mode="before")
    @classmethod
    def _check_rate_end(cls, value: Any, info: ValidationInfo) -> float | None:
        pattern = info.data.get("pattern")
        if value is None:
            if pattern in ("ramp", "step"):
                raise ValueError(f"field required for pattern {pattern!r}")
            return None
        return _check_rate_value(value)

    @field_validator("spike_rate", mode="before")
    @classmethod
    def _check_spike_rate(cls, value: Any, info: ValidationInfo) -> float | None:
        if value is None:
            if info.data.get("pattern") == "spike":
                raise ValueError("field required for pattern 'spike'")
            return None
        return _check_rate_value(value)

    @field_validator("trace", mode="before")
    @classmethod
    def _check_trace(cls, value: Any, info: ValidationInfo) -> Any:
        if value is None:
            if info.data.get("pattern") == "trace":
                raise ValueError("field required for pattern 'trace' (send offsets in seconds, or {dataset: ID})")
            return None
        if info.data.get("pattern") != "trace":
            raise ValueError("only used with pattern 'trace'")
        if isinstance(value, TraceRef):
            return value
        if isinstance(value, dict):  # an uploaded trace file, by its data set's id
            try:
                return TraceRef.model_validate(value)
            except ValidationError as exc:
                first = field_errors(exc)[0]
                raise ValueError(f"{{dataset: ID}} of an uploaded trace: {first['field']}: {first['message']}") from None
        if not isinstance(value, list) or not value:
            raise ValueError("must be a non-empty list of send offsets in seconds")
        if len(value) > MAX_TRACE_ENTRIES:
            raise ValueError(f"has {len(value)} entries; at most {MAX_TRACE_ENTRIES} are allowed")
        out: list[float] = []
        for i, item in enumerate(value):
            if isinstance(item, bool) or not isinstance(item, int | float) or not 0 <= item <= MAX_DURATION_S:
                raise ValueError(f"entries must be seconds in [0, {MAX_DURATION_S:g}], got {item!r}")
            # A trace is a recording, not a set: refused like an uploaded one (common/traces.py), never sorted.
            if out and item < out[-1]:
                raise ValueError(f"entry {i} ({item:g} s) is earlier than the one before ({out[-1]:g} s); "
                                 "offsets must never decrease")  # fmt: skip
            out.append(float(item))
        return out

    @field_validator("concurrency", mode="before")
    @classmethod
    def _check_concurrency(cls, value: Any, info: ValidationInfo) -> list[int] | None:
        if value is None:
            if info.data.get("pattern") == "closed":
                raise ValueError("field required for pattern 'closed' (number of concurrent users)")
            return None
        if info.data.get("pattern") != "closed":
            raise ValueError("only used with pattern 'closed'")
        values = value if isinstance(value, list) else [value]
        if not values:
            raise ValueError("must name at least one concurrency")
        for item in values:
            if isinstance(item, bool) or not isinstance(item, int) or not 0 < item <= MAX_CONCURRENCY:
                raise ValueError(f"entries must be whole numbers in [1, {MAX_CONCURRENCY}], got {item!r}")
        if len(set(values)) != len(values):
            raise ValueError("must not repeat an entry")
        return list(values)

    @field_validator("search")
    @classmethod
    def _check_search(cls, value: SearchSpec | None, info: ValidationInfo) -> SearchSpec | None:
        if value is not None and info.data.get("pattern") in ("trace", "closed"):
            raise ValueError(f"cannot search a rate with pattern {info.data.get('pattern')!r}")
        return value

    def ladder(self) -> list[tuple[float, int | None]]:
        """(rate, concurrency) per grid entry: the rate ladder, the concurrency ladder, a trace or a search."""
        if self.pattern == "closed":
            return [(0.0, c) for c in self.concurrency or []]
        if isinstance(self.trace, TraceRef):
            # The file's length is known only to the leader and the follower; the follower sets the point's rate.
            return [(0.0, None)]
        if self.pattern == "trace":
            inside = [t for t in self.trace or [] if t < self.duration]
            return [(max(len(inside), 1) / self.duration, None)]
        if self.search is not None:
            return [(self.search.high, None)]
        return [(r, None) for r in self.rate or []]

    @property
    def rates(self) -> list[float]:
        """The nominal rate of each grid entry (0 for closed loop)."""
        return [rate for rate, _ in self.ladder()]

    @property
    def max_run_s(self) -> float:
        """The longest one measured run can last (the stability cap, else the duration)."""
        return max(self.duration, self.stability.max_duration) if self.stability else self.duration


class SLO(_Strict):
    """Latency objectives a point must meet (measured from the intended send time)."""

    p50_ms: Annotated[float, Field(gt=0)] | None = None
    p99_ms: Annotated[float, Field(gt=0)] | None = None


class DynamicBatching(_Strict):
    """Server-side dynamic batching: requests wait up to `max_queue_delay_us` to be merged into one run."""

    max_batch_size: Annotated[int, Field(gt=0, le=MAX_BATCH)] = 32
    preferred_batch_sizes: list[Annotated[int, Field(gt=0, le=MAX_BATCH)]] = []
    max_queue_delay_us: Annotated[int, Field(ge=0, le=10_000_000)] = 100


class ServerOptions(_Strict):
    """How the serving system is configured (each backend applies what it supports; defaults keep old YAML valid)."""

    dynamic_batching: DynamicBatching | None = None
    instances: Annotated[int, Field(gt=0, le=64)] = 1
    threads: Annotated[int, Field(gt=0, le=256)] | None = None
    execution_provider: Annotated[str, Field(pattern=r"^[A-Za-z]{1,64}$")] = "CPUExecutionProvider"
    protocol: Literal["http", "grpc"] = "http"
    # Server-side processors (follower.servers.processing), filled from `data` by expand() when `data.processing: server`.
    preprocess: Annotated[str, Field(pattern=r"^[a-z0-9_]{1,64}$")] | None = None
    postprocess: Annotated[str, Field(pattern=r"^[a-z0-9_]{1,64}$")] | None = None
    # Where the model runs: TorchScript moves module and tensors there, onnxruntime takes CUDAExecutionProvider
    # (unless execution_provider names another GPU provider), Triton gets KIND_GPU instances on that GPU.
    device: Annotated[str, Field(pattern=r"^(cpu|cuda(:[0-9]{1,2})?)$")] = "cpu"

    @property
    def uses_gpu(self) -> bool:
        """Whether this configuration runs the model on a GPU."""
        return self.device != "cpu" or self.execution_provider in GPU_PROVIDERS

    @property
    def ort_provider(self) -> str:
        """The onnxruntime execution provider to ask for: `device: cuda` upgrades the CPU default to CUDA."""
        if self.device != "cpu" and self.execution_provider == "CPUExecutionProvider":
            return "CUDAExecutionProvider"
        return self.execution_provider

    @property
    def gpu_index(self) -> int:
        """The GPU ordinal of `device` (cuda → 0)."""
        return int(self.device.partition(":")[2] or 0)


class DataRef(_Strict):
    """Request data: synthetic from the signature, a sample image shipped with scikit-image, or an uploaded set."""

    source: Literal["synthetic", "sample_images", "upload"] = "synthetic"
    id: Annotated[str, Field(pattern=r"^[A-Za-z0-9]{1,64}$")] | None = None  # the uploaded data set's id
    preprocess: Annotated[str, Field(pattern=r"^[a-z0-9_]{1,64}$")] | None = None  # a registered processor name
    postprocess: Annotated[str, Field(pattern=r"^[a-z0-9_]{1,64}$")] | None = None
    processing: Literal["client", "server"] = "client"

    @model_validator(mode="after")
    def _server_side_needs(self) -> DataRef:
        # Refused at submission rather than failing on the follower.
        if self.processing == "server":
            if self.preprocess is None and self.postprocess is None:
                raise ValueError("processing: server needs a preprocess or postprocess processor to run on the server")
            if self.preprocess is not None and self.source == "synthetic":
                raise ValueError("server-side preprocess needs raw request data (source: sample_images or upload), "
                                 "not synthetic tensors")
        return self

    @model_validator(mode="after")
    def _id_for_upload(self) -> DataRef:
        if (self.source == "upload") != (self.id is not None):
            raise ValueError("id is required with source: upload, and only then")
        return self


class ExpectedTensor(_Strict):
    """An input the job expects the model to take; checked against the model before any server starts."""

    name: str
    datatype: str
    shape: list[int]


class Requires(_Strict):
    """Hardware a follower must have to run the job; a job nobody can run stays queued with the reason."""

    gpu: bool = False
    gpu_model: Annotated[str, Field(min_length=1, max_length=128)] | None = None  # case-insensitive substring of the name
    min_gpu_memory_mb: Annotated[int, Field(gt=0)] | None = None

    @property
    def needs_gpu(self) -> bool:
        """Asking for a GPU model or GPU memory implies asking for a GPU."""
        return self.gpu or self.gpu_model is not None or self.min_gpu_memory_mb is not None


class SplitSpec(_Strict):
    """Run a large grid as parts on several followers of one hardware class, merged back into one result."""

    max_parts: Annotated[int, Field(ge=2, le=64)]  # at most this many parts (fewer when there are fewer points)
    min_points: Annotated[int, Field(ge=1)] = 1  # points per part at least; a grid below 2 x min_points is not split


class JobSpec(_Strict):
    """A benchmark submission; lists in it form a grid of benchmark points."""

    name: Annotated[str, Field(pattern=NAME_PATTERN)]
    model: ModelRef
    backends: Annotated[list[BackendName], Field(min_length=1)] = ["onnxruntime"]
    batch_sizes: Annotated[list[Annotated[int, Field(gt=0, le=MAX_BATCH)]], Field(min_length=1)] = [1]
    load: LoadSpec
    slo: SLO | None = None
    seed: Annotated[int, Field(ge=0, lt=2**32)] = 0
    server: ServerOptions = ServerOptions()
    data: DataRef = DataRef()
    inputs: list[ExpectedTensor] | None = None
    requires: Requires = Requires()
    split: SplitSpec | None = None  # opt-in: the grid's points split into parts run by several followers

    @model_validator(mode="before")
    @classmethod
    def _gpu_server_needs_gpu(cls, data: Any) -> Any:
        # A server configured for a GPU can only run on a follower with one: say so in `requires`, which placement
        # reads, rather than letting the job land on a CPU-only follower and fail there.
        if not isinstance(data, dict) or not isinstance(data.get("server"), dict):
            return data
        server = data["server"]
        device = server.get("device", "cpu")
        if not (isinstance(device, str) and device.startswith("cuda")) and server.get("execution_provider") not in GPU_PROVIDERS:
            return data
        requires = data.get("requires") if data.get("requires") is not None else {}
        if not isinstance(requires, dict):
            return data
        if requires.get("gpu") is False:
            raise ValueError("requires.gpu: false contradicts a server configured for a GPU "
                             "(server.device or server.execution_provider)")
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
        if self.load.search is not None and (self.slo is None or (self.slo.p50_ms is None and self.slo.p99_ms is None)):
            raise ValueError("load.search needs an slo (p50_ms or p99_ms) to search against")
        return self

    @model_validator(mode="after")
    def _grid_size(self) -> JobSpec:
        n = len(self.backends) * len(self.batch_sizes) * len(self.load.rates)
        if n > MAX_POINTS:
            raise ValueError(f"grid has {n} points; at most {MAX_POINTS} are allowed")
        return self


class PointSpec(_Strict):
    """One benchmark point of a job's grid, as the follower runs it."""

    index: int
    backend: BackendName
    batch_size: int
    pattern: Pattern
    rate: float  # nominal rate (req/s); 0 for a closed loop
    duration_s: float
    warmup_s: float
    max_concurrency: int
    seed: int
    # Shape of the load beyond the rate (defaults keep points stored before these existed valid).
    cap_policy: Literal["wait", "drop"] = "wait"
    cv: float = 1.0
    rate_end: float | None = None
    steps: int = 4
    spike_rate: float | None = None
    spike_at_s: float | None = None
    spike_duration_s: float = 1.0
    on_s: float = 1.0
    off_s: float = 1.0
    trace_s: list[float] | None = None
    trace_dataset: str | None = None  # an uploaded trace file (its id); the follower fetches and replays it
    concurrency: int | None = None
    search: SearchSpec | None = None
    window_s: float = 1.0
    stability: Stability | None = None
    server: ServerOptions = ServerOptions()


# Backends whose server can run benchfleet's processors, and why the others cannot.
SERVER_PROCESSING_BACKENDS = frozenset({"onnxruntime", "torchscript", "triton"})
NO_SERVER_PROCESSING = {"tfserving": "TF Serving runs only the SavedModel graph, no benchfleet code"}


def _served(spec: JobSpec) -> ServerOptions:
    """The job's server options, with the processors that run server-side when `data.processing` is server."""
    if spec.data.processing != "server":
        return spec.server
    return spec.server.model_copy(update={"preprocess": spec.data.preprocess, "postprocess": spec.data.postprocess})


def expand(spec: JobSpec) -> list[PointSpec]:
    """Expand the grid backends × batch sizes × rates into points, in a stable order."""
    points: list[PointSpec] = []
    for backend in spec.backends:
        for batch in spec.batch_sizes:
            for rate, concurrency in spec.load.ladder():
                index = len(points)
                load = spec.load
                points.append(
                    PointSpec(
                        index=index,
                        backend=backend,
                        batch_size=batch,
                        pattern=load.pattern,
                        rate=rate,
                        duration_s=load.duration,
                        warmup_s=load.warmup,
                        max_concurrency=load.max_concurrency,
                        seed=(spec.seed * 1_000_003 + index) % 2**32,
                        cap_policy=load.cap_policy,
                        cv=load.cv,
                        rate_end=load.rate_end,
                        steps=load.steps,
                        spike_rate=load.spike_rate,
                        spike_at_s=load.spike_at,
                        spike_duration_s=load.spike_duration,
                        on_s=load.on,
                        off_s=load.off,
                        trace_s=load.trace if isinstance(load.trace, list) else None,
                        trace_dataset=load.trace.dataset if isinstance(load.trace, TraceRef) else None,
                        concurrency=concurrency,
                        search=load.search,
                        window_s=load.window,
                        stability=load.stability,
                        server=_served(spec),
                    )
                )
    return points


def estimate_seconds(spec: JobSpec) -> float:
    """A first estimate of a job's run time: every point's warm-up and duration plus a start cost per backend."""
    per_point = spec.load.warmup + spec.load.max_run_s
    if spec.load.search is not None:
        per_point *= spec.load.search.max_steps  # every search step is a run of its own
    n_points = len(spec.backends) * len(spec.batch_sizes) * len(spec.load.rates)
    return n_points * per_point + 5.0 * len(spec.backends)


_MESSAGES = {
    "greater_than": "must be > {gt}",
    "greater_than_equal": "must be >= {ge}",
    "less_than": "must be < {lt}",
    "less_than_equal": "must be <= {le}",
    "extra_forbidden": "unknown field",
    "missing": "field required",
}


def field_errors(exc: ValidationError) -> list[dict[str, str]]:
    """Pydantic errors as [{"field": "load.rate", "message": ...}] with dotted paths."""
    out = []
    for err in exc.errors(include_url=False):
        loc = [str(p) for p in err["loc"] if not (isinstance(p, str) and p.startswith(("function-", "constrained-")))]
        # Drop pydantic's union-branch labels (e.g. "float", "list[...]") so the path names the field.
        loc = [p for p in loc if not (p in {"float", "int", "str"} or p.startswith(("list[", "tagged-union")))]
        message = _MESSAGES[err["type"]].format(**err.get("ctx", {})) if err["type"] in _MESSAGES else err["msg"]
        message = message.removeprefix("Value error, ")
        out.append({"field": ".".join(loc) or "(root)", "message": message})
    return out


def parse_spec(data: Any) -> JobSpec:
    """Validate a decoded document as a JobSpec, raising InvalidSpec that names the field."""
    if not isinstance(data, dict):
        raise InvalidSpec("job spec must be a mapping of fields", field="(root)")
    try:
        return JobSpec.model_validate(data)
    except ValidationError as exc:
        errors = field_errors(exc)
        first = errors[0]
        raise InvalidSpec(f"{first['field']}: {first['message']}", field=first["field"], details=errors) from None


def load_yaml(text: str | bytes) -> Any:
    """Parse YAML safely (no tags, no objects), refusing oversized documents and alias bombs."""
    if len(text) > MAX_SPEC_BYTES:
        raise InvalidSpec(f"spec is larger than {MAX_SPEC_BYTES} bytes", field="(body)")
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidSpec("spec is not UTF-8 text", field="(body)") from None
    try:
        loader = yaml.SafeLoader(text)
        try:
            node = loader.get_single_node()
            if node is not None and _count_nodes(node, budget=10_000) < 0:
                raise InvalidSpec("spec has too many nodes (aliases expand too far)", field="(body)")
            return loader.construct_document(node) if node is not None else None
        finally:
            loader.dispose()
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise InvalidSpec(f"malformed YAML{where}: {problem}", field="(body)") from None


def _count_nodes(node: yaml.Node, budget: int) -> int:
    """Walk the node graph counting visits (aliases re-visit); return the budget left, negative if exceeded."""
    stack = [node]
    while stack:
        current = stack.pop()
        budget -= 1
        if budget < 0:
            return budget
        if isinstance(current, yaml.SequenceNode):
            stack.extend(current.value)
        elif isinstance(current, yaml.MappingNode):
            for key, value in current.value:
                stack.append(key)
                stack.append(value)
    return budget


def parse_spec_yaml(text: str | bytes) -> JobSpec:
    """YAML text to a validated JobSpec."""
    return parse_spec(load_yaml(text))
