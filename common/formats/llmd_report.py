"""The llm-d benchmark report, version 0.2, as its documentation defines it (llm-d-benchmark's benchmark_report:
schema_v0_2 and its components): written here as benchfleet's own models of the parts a benchfleet export fills and
checks, strict where that schema is strict (unknown fields refused, units from its lists, lengths and counts bounded),
so an export that validates here is a report llm-d's tools read. `validate_report` is the check."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

STRICT = ConfigDict(extra="forbid")

# The schema's units, and which apply where.
Unit = (
    Literal["count", "percent", "fraction", "ms", "s", "MB", "GB", "TB", "MiB", "GiB", "TiB", "Mbit/s", "Gbit/s"]
    | Literal["Tbit/s", "GiB/s", "MB/s", "GB/s", "TB/s", "ms/token", "s/token", "tokens/s", "queries/s", "Watts"]
)
QUANTITY, TIME, GEN_LATENCY, GEN_THROUGHPUT, REQUEST_THROUGHPUT = (
    {"count"},
    {"ms", "s"},
    {"ms/token", "s/token"},
    {"tokens/s"},
    {"queries/s"},
)


class Statistics(BaseModel):
    """A property's summary: its units and mean, and what else is known of its distribution."""

    model_config = STRICT
    units: Unit
    mean: float
    mode: float | None = None
    stddev: Annotated[float, Field(ge=0)] | None = None
    min: float | None = None
    p0p1: float | None = None
    p1: float | None = None
    p5: float | None = None
    p10: float | None = None
    p25: float | None = None
    p50: float | None = None
    p75: float | None = None
    p90: float | None = None
    p95: float | None = None
    p99: float | None = None
    p99p9: float | None = None
    max: float | None = None


def _units(value: Statistics | None, allowed: set[str], name: str) -> None:
    if value is not None and value.units not in allowed:
        raise ValueError(f"{name}: units {value.units!r} must be one of {sorted(allowed)}")


class AggregateRequests(BaseModel):
    model_config = STRICT
    total: Annotated[int, Field(ge=0)]
    failures: Annotated[int, Field(ge=0)] | None = None
    incomplete: Annotated[int, Field(ge=0)] | None = None
    input_length: Statistics | None = None
    output_length: Statistics | None = None

    @model_validator(mode="after")
    def _check(self) -> AggregateRequests:
        _units(self.input_length, QUANTITY, "input_length")
        _units(self.output_length, QUANTITY, "output_length")
        return self


class AggregateLatency(BaseModel):
    model_config = STRICT
    time_to_first_token: Statistics | None = None
    normalized_time_per_output_token: Statistics | None = None
    time_per_output_token: Statistics | None = None
    inter_token_latency: Statistics | None = None
    request_latency: Statistics | None = None

    @model_validator(mode="after")
    def _check(self) -> AggregateLatency:
        _units(self.time_to_first_token, TIME, "time_to_first_token")
        _units(self.request_latency, TIME, "request_latency")
        for name in ("normalized_time_per_output_token", "time_per_output_token", "inter_token_latency"):
            _units(getattr(self, name), GEN_LATENCY, name)
        return self


class AggregateThroughput(BaseModel):
    model_config = STRICT
    input_token_rate: Statistics | None = None
    output_token_rate: Statistics | None = None
    total_token_rate: Statistics | None = None
    requests_rate: Statistics | None = None

    @model_validator(mode="after")
    def _check(self) -> AggregateThroughput:
        for name in ("input_token_rate", "output_token_rate", "total_token_rate"):
            _units(getattr(self, name), GEN_THROUGHPUT, name)
        _units(self.requests_rate, REQUEST_THROUGHPUT, "requests_rate")
        return self


class Aggregate(BaseModel):
    model_config = STRICT
    requests: AggregateRequests | None = None
    latency: AggregateLatency | None = None
    throughput: AggregateThroughput | None = None


class RequestPerformance(BaseModel):
    model_config = STRICT
    aggregate: Aggregate | None = None
    time_series: dict[str, Any] | None = None  # (benchfleet's export writes none)


class Results(BaseModel):
    model_config = STRICT
    request_performance: RequestPerformance | None = None
    observability: dict[str, Any] | None = None  # the schema keeps it open until defined
    profiling: Any | None = None


class ComponentMetadata(BaseModel):
    model_config = STRICT
    kind: str
    schema_version: str = "0.0.1"
    label: str
    cfg_id: str
    description: str | None = None


class Parallelism(BaseModel):
    model_config = STRICT
    dp: Annotated[int, Field(ge=1)] = 1
    ep: Annotated[int, Field(ge=1)] = 1
    pp: Annotated[int, Field(ge=1)] = 1
    tp: Annotated[int, Field(ge=1)] = 1


class Accelerator(BaseModel):
    model_config = STRICT
    model: str
    count: Annotated[int, Field(ge=1)]
    parallelism: Parallelism


class EngineModel(BaseModel):
    model_config = STRICT
    name: str


class InferenceEngine(BaseModel):
    """`kind: inference_engine`'s standardized section."""

    model_config = STRICT
    tool: str
    tool_version: str
    role: Literal["replica", "prefill", "decode"]
    model: EngineModel
    accelerator: Accelerator


class Generic(BaseModel):
    """`kind: generic`'s standardized section: a tool and its version, anything else unchecked."""

    model_config = ConfigDict(extra="allow")
    tool: str
    tool_version: str


class Native(BaseModel):
    model_config = STRICT
    args: dict[str, Any] | None = None
    envars: dict[str, Any] | None = None
    config: Any | None = None


class Component(BaseModel):
    model_config = STRICT
    metadata: ComponentMetadata
    standardized: InferenceEngine | Generic
    native: Native

    @model_validator(mode="before")
    @classmethod
    def _by_kind(cls, data: Any) -> Any:
        """The metadata's kind picks the standardized section's schema (the report never writes kind there)."""
        if isinstance(data, dict) and isinstance(data.get("standardized"), dict):
            if "kind" in data["standardized"]:
                raise ValueError("standardized must not hold kind (it is the metadata's)")
            kind = str((data.get("metadata") or {}).get("kind"))
            standardized: InferenceEngine | Generic
            if kind == "inference_engine":
                standardized = InferenceEngine.model_validate(data["standardized"])
            elif kind == "generic":
                standardized = Generic.model_validate(data["standardized"])
            else:
                raise ValueError(f"metadata.kind {kind!r} must be inference_engine or generic")
            data = {**data, "standardized": standardized}
        return data


class SequenceLength(BaseModel):
    model_config = STRICT
    distribution: Literal["fixed", "gaussian", "random", "other"]
    value: Annotated[float, Field(ge=1)]
    std_dev: Annotated[float, Field(ge=0)] | None = None
    min: Annotated[int, Field(ge=0)] | None = None
    max: Annotated[int, Field(ge=1)] | None = None


class LoadStandardized(BaseModel):
    model_config = STRICT
    tool: str
    tool_version: str
    source: Literal["random", "sampled"]
    stage: Annotated[int, Field(ge=0)] = 0
    input_seq_len: SequenceLength
    output_seq_len: SequenceLength | None = None
    prefix: dict[str, Any] | None = None
    multi_turn: dict[str, Any] | None = None
    rate_qps: Annotated[float, Field(gt=0)] | None = None
    concurrency: Annotated[float, Field(ge=1)] | None = None

    @model_validator(mode="after")
    def _concurrency(self) -> LoadStandardized:
        if self.concurrency is not None and self.concurrency != float("inf") and not float(self.concurrency).is_integer():
            raise ValueError("concurrency must be a whole number or .inf")
        return self


class LoadMetadata(BaseModel):
    model_config = STRICT
    schema_version: str = "0.0.1"
    cfg_id: str | None = None
    description: str | None = None


class Load(BaseModel):
    model_config = STRICT
    metadata: LoadMetadata
    standardized: LoadStandardized
    native: Native


class Scenario(BaseModel):
    model_config = STRICT
    stack: list[Component] | None = None
    load: Load | None = None


class RunTime(BaseModel):
    model_config = STRICT
    start: datetime | None = None
    end: datetime | None = None
    duration: str | None = None  # ISO 8601 (PT12.5S)


class Run(BaseModel):
    model_config = STRICT
    uid: str | None = None
    eid: str | None = None
    cid: str | None = None
    pid: str | None = None
    time: RunTime | None = None
    user: str | None = None


class BenchmarkReport(BaseModel):
    """The whole report."""

    model_config = STRICT
    version: Literal["0.2"] = "0.2"
    run: Run
    scenario: Scenario | None = None
    results: Results


def validate_report(doc: dict[str, Any]) -> list[str]:
    """Where `doc` breaks the v0.2 schema, one line per error naming its path (empty: a valid report)."""
    try:
        BenchmarkReport.model_validate(doc)
    except ValidationError as exc:
        return [f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()]
    return []
