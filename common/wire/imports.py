"""Runs measured by other tools and imported: what a point says about where its figures came from, and the import's
answer. The parsers are in common/formats/imports/; the leader's route and store turn a run into a job of kind
`imported`."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

# The tools whose result files benchfleet reads.
Tool = Literal["vllm", "aiperf", "guidellm", "inference-perf", "genai-bench", "perf_analyzer", "loadgen"]

TOOL_NAMES: dict[str, str] = {
    "vllm": "vllm bench serve",
    "aiperf": "AIPerf",
    "guidellm": "GuideLLM",
    "inference-perf": "inference-perf",
    "genai-bench": "genai-bench",
    "perf_analyzer": "perf_analyzer",
    "loadgen": "MLPerf LoadGen",
}


class Definitions(BaseModel):
    """How the tool defines each figure, in words (docs/llm.md has the table): shown beside every imported figure."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    latency: str
    ttft: str | None = None
    itl: str | None = None
    tpot: str | None = None


class Recomputed(BaseModel):
    """Benchfleet's own figures recomputed from the file's per-request records, with benchfleet's definitions (latency
    and TTFT from the intended send where the records say when each request was due), beside the tool's."""

    model_config = ConfigDict(extra="forbid")

    requests: int  # answered requests the figures are over
    counted_from: str  # where latency and TTFT start: the records' due time (what the tool calls it), or the send
    latency_p50_ms: float
    latency_p99_ms: float
    ttft_p50_ms: float | None = None
    ttft_p99_ms: float | None = None
    itl_p50_ms: float | None = None
    itl_p99_ms: float | None = None
    tpot_p50_ms: float | None = None
    tpot_p99_ms: float | None = None
    # How far each of the tool's figures moves under benchfleet's definition: (benchfleet's - the tool's) / the tool's,
    # keyed like the point's figures (latency_p99_ms, ttft_p50_ms, ...). Only figures both sides have.
    shift: dict[str, float] = {}


class ImportedFrom(BaseModel):
    """An imported point's origin: the tool, its definitions, why it is not judged, and where the tool fell behind."""

    model_config = ConfigDict(extra="forbid")

    tool: Tool
    version: str | None  # the tool's version where the file says it
    definitions: Definitions
    not_judged: str  # why benchfleet gives it no validity verdict
    behind: list[str] = []  # where the file shows the tool fell behind its schedule (said, not judged)
    recomputed: Recomputed | None = None  # benchfleet's figures from the file's per-request records, where it has them
    level: str  # the load level as the tool named it ("request rate 4", "concurrency 2")


class ImportSummary(BaseModel):
    """The answer to an import: the job it became and its points."""

    model_config = ConfigDict(extra="forbid")

    job_id: str
    tool: Tool
    version: str | None
    points: int
    files: list[str]  # the raw files kept with the job
    command: str | None  # the tool's command line where the file has it


class ImportedRun(BaseModel):
    """An imported job's origin as a whole: the tool, what it was asked, and the raw files kept with it."""

    model_config = ConfigDict(extra="forbid")

    tool: Tool
    version: str | None
    command: str | None  # the tool's command line where its files have it
    model: str | None  # the model as the tool named it
    url: str | None  # the server it drove, where its files say
    settings: dict[str, str] = {}  # what else the files say about how it ran
    files: list[str]  # the raw files, kept with the job (GET /api/v1/jobs/{id}/imported/{name})
