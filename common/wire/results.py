"""Measurement results: what a follower sends up for each benchmark point."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, computed_field, model_validator

from common.spec.job import PointSpec
from common.wire.audit import WireAudit
from common.wire.imports import ImportedFrom
from common.wire.percentiles import Percentiles
from common.wire.quality import Quality
from common.wire.search import SearchAnswer
from common.wire.sessions import SessionFigures


class ColdStart(BaseModel):
    """Server cold start: process start → ready → first successful answer, in seconds."""

    model_config = ConfigDict(extra="forbid")

    to_ready_s: float
    to_first_answer_s: float


class Conversion(BaseModel):
    """A user's model converted on the follower to the form its backend serves (follower/convert/user_model.py), with
    the numeric check of the converted model's outputs against the original's on the same inputs."""

    model_config = ConfigDict(extra="forbid")

    source: str  # the stored model's format (torchscript)
    target: str  # the form served (onnx)
    passed: bool
    max_abs_diff: float
    max_rel_diff: float
    rtol: float
    atol: float
    samples: int  # rows of the batch the two were compared on
    seconds: float  # the conversion's wall time, outside the cold start
    sandboxed: bool  # whether the original's code ran in the model sandbox (else: a model an admin trusted)

    def summary(self) -> str:
        """One line: what was converted and how close the two models agree."""
        verdict = "agrees" if self.passed else "DISAGREES"
        return (
            f"converted {self.source} -> {self.target} in {self.seconds:.1f} s; {verdict} with the original on "
            f"{self.samples} samples (max abs diff {self.max_abs_diff:.2e}, rel {self.max_rel_diff:.2e}; "
            f"rtol {self.rtol:g}, atol {self.atol:g})"
        )


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
    # The reproducibility record (common/wire/repro.py); None or empty where the host does not say, or in a result
    # stored before it existed.
    config_hash: str | None = None  # sha256 over everything that decides the number (repro.config_hash)
    os: str | None = None  # the distribution's name and version (os-release PRETTY_NAME)
    kernel: str | None = None
    cpu_governor: str | None = None  # cpufreq's scaling governor of the CPUs (None: no cpufreq, as in most VMs)
    gpu_uuids: list[str] = []
    gpu_driver: str | None = None
    cuda: str | None = None  # the CUDA version the driver supports
    packages: dict[str, str] = {}  # the follower's key packages and their versions
    # The container image the follower runs, as deployed (BENCHFLEET_IMAGE, which the chart and compose set): its
    # digest where deployed by one (repository@sha256:...), else repository:tag.
    image: str | None = None


class WindowStat(BaseModel):
    """One measurement window of a point (live progress and the stability check)."""

    model_config = ConfigDict(extra="forbid")

    t_s: float  # window start, seconds since the measured part began (negative during warm-up)
    duration_s: float
    requests: int  # intended in the window
    ok: int
    throughput: float  # ok / duration, req/s
    p50_ms: float | None = None
    p99_ms: float | None = None  # latency from the intended time; in-flight requests count with their age so far
    send_lag_p99_ms: float | None = None
    # A language model's window: output tokens of its answered requests per second (the server's counts), and time
    # to first token p99 from the intended time (requests still waiting for their first token count with their age).
    tokens_per_s: float | None = None
    ttft_p99_ms: float | None = None
    # Its inter-token latency p50 (the gaps between token events of the answered requests), and the server's own
    # gauges read once per window where its metrics give them: requests running (its batch) and waiting, and the
    # share of its KV cache in use (0..1), each the mean of the reads inside the window.
    itl_p50_ms: float | None = None
    server_running: float | None = None
    server_waiting: float | None = None
    kv_cache_usage: float | None = None


class Resources(BaseModel):
    """What the serving process and the GPUs used during the measured part (None: not measurable here, never 0)."""

    model_config = ConfigDict(extra="forbid")

    samples: int = 0
    interval_ms: float | None = None
    server_cpu_percent_mean: float | None = None  # 100 = one core busy
    server_cpu_percent_max: float | None = None
    server_rss_mb_mean: float | None = None
    server_rss_mb_max: float | None = None
    gpu_util_percent_mean: float | None = None
    gpu_memory_mb_max: float | None = None
    gpu_power_w_mean: float | None = None
    energy_j: float | None = None  # GPU energy over the measured part
    cpu_energy_j: float | None = None  # CPU package energy (RAPL powercap) over the run, where readable
    energy_per_request_j: float | None = None
    co2_g_per_1m_requests: float | None = None
    cost_per_1m_requests: float | None = None  # in the configured instance price's currency
    cost_per_1m_output_tokens: float | None = None  # a language model's: the price over the output tokens served
    energy_per_1k_output_tokens_j: float | None = None  # a language model's, where energy is measured


class ServerStats(BaseModel):
    """What the serving system itself counted over the point's run (warm-up included): how it batched and queued."""

    model_config = ConfigDict(extra="forbid")

    inferences: int  # requests the server answered
    executions: int  # engine runs; dynamic batching merges several inferences into one
    mean_batch: float | None = None  # inferences per execution
    queue_ms_mean: float | None = None  # server queue per request (batching delay + wait for an instance)
    compute_ms_mean: float | None = None  # engine run time per request
    # Server-side processing per request (data.processing: server); None where no processor ran on the server.
    preprocess_ms_mean: float | None = None
    postprocess_ms_mean: float | None = None


class GeneratorPlan(BaseModel):
    """How many generator processes a point ran and why: needed cores = target rate x CPU per request (for a streamed
    answer, the request's own CPU plus its token events' CPU)."""

    model_config = ConfigDict(extra="forbid")

    processes: int
    cores_needed: float  # rate x the follower's learned CPU seconds per request (with its token events)
    cores_available: int  # cores given to the generator (follower.host.cpuplan)
    cpu_per_request_us: float
    cpu_per_token_event_us: float | None = None  # a streamed answer's CPU per token event (LLM points)
    token_events_per_s: float | None = None  # the token events the point's rate will bring, at its asked lengths
    forced: bool = False  # the operator's follower setting `generators` chose the count
    saturated: bool = False  # more cores were needed than available: the point is invalid
    reason: str


# Why a point is not valid, as data: pages and tables show the text, code decides on the code.
ReasonCode = Literal[
    "no_requests",  # nothing was sent in the measured window
    "send_lag",  # requests that had a free in-flight slot left later than their intended time (p99 over the limit)
    "cap_reached",  # requests waited for one of the in-flight slots, and that wait made them late
    "server_saturated",  # the server delivered less than offered and its backlog grew across the windows
    "rate_missed",  # the achieved rate misses the offered one
    "too_few",  # too few answers for a p99 claim
    "generator_saturated",  # the generator's core was busy past the limit during the run
    "generator_capacity",  # the rate needs more generator cores than the host has (known before the run)
    "dropped",  # requests dropped at the in-flight cap
    "errors",  # too many requests failed
    "unanswered",  # requests still unanswered when the run ended (the point's drain bound ran out): latency unknown
    "server_not_running",  # the server was gone before the point started
    "server_died",  # the server died during the point
    "unstable",  # a stability rule was set and the windows did not agree
    "unsteady",  # one window stood out from the others (a stall), with or without a stability rule
    "search_failed",  # no rate of a search was valid and met the SLO
    "token_mismatch",  # a language model's token counts (asked, the server's, the client tokenizer's) disagree
    "buffered_stream",  # streamed answers whose token events all arrived at once (time to first token is not there)
    "shard_lost",  # a shard of a sharded point started and its records never came (its follower died, say)
    "shard_absent",  # a shard was not ready when the point started: its share went unsent
    "shard_skew",  # the shards started further apart, or their clock offsets are less sure, than a merged point allows
    "gpu_foreign",  # a process that is not the follower's used a GPU when the point started or ended
    "backlog",  # a search probe: the server was still working off the previous probe's backlog when it would start
    "not_judged",  # imported from another tool's files: benchfleet did not watch the run, so it gives no verdict
    "other",  # a reason stored before reasons had codes that matches none of the above
]


class ServerQuantile(BaseModel):
    """A quantile of a server's own histogram over the run: the estimate (linear inside its bucket, as Prometheus'
    histogram_quantile) and the bucket's edges, which bound the true value."""

    model_config = ConfigDict(extra="forbid")

    ms: float
    low_ms: float
    high_ms: float | None  # None: the quantile fell in the +Inf bucket

    def holds(self, value_ms: float) -> bool:
        """Whether a value lies within what the histogram allows for this quantile."""
        return self.low_ms <= value_ms and (self.high_ms is None or value_ms <= self.high_ms)


class LlmServerView(BaseModel):
    """What an LLM server itself measured over the point's run (warm-up included), from its Prometheus metrics:
    means in ms of its own histograms, their p50 and p99 within their buckets, and its counters' increase."""

    model_config = ConfigDict(extra="forbid")

    requests: int | None  # requests it finished (None: it counts none, as llama.cpp)
    prompt_tokens: int  # its prompts' tokens, those its prefix cache held included
    generation_tokens: int
    ttft_ms_mean: float | None = None  # its time to first token (from the request's arrival in the engine)
    itl_ms_mean: float | None = None  # its inter-token latency
    e2e_ms_mean: float | None = None
    queue_ms_mean: float | None = None  # waiting for the scheduler
    prefill_ms_mean: float | None = None
    decode_ms_mean: float | None = None
    preemptions: int = 0
    prefix_cache_hit_share: float | None = None  # prefix-cache hits over queries, in tokens
    cache_reset: bool | None = None  # its prefix cache emptied before the point (None: not asked; False: not offered)
    kv_cache_usage: float | None = None  # the KV cache's fill at the end of the point (0..1)
    quantiles: dict[str, ServerQuantile] = {}  # ttft_p50, ttft_p99, itl_p50, itl_p99 where the server exports buckets


class LlmFigures(BaseModel):
    """A language-model point's figures over its measured, answered requests. Each latency is from the intended time
    (what a user waited) and, as `_sent`, from the send (what the peer tools report); the gap is the generator's."""

    model_config = ConfigDict(extra="forbid")

    ttft_ms: Percentiles | None  # first token event - intended time
    ttft_ci_ms: dict[str, tuple[float, float]] | None = None  # 95% CIs of its p50/p99 (block bootstrap)
    ttft_hdr: str | None = None  # its HDR histogram (ns), common.stats.encode; mergeable across runs and shards
    ttft_sent_ms: Percentiles | None  # first token event - send
    itl_ms: Percentiles | None  # gaps between successive token events, every request's pooled
    itl_request_ms: Percentiles | None  # each request's mean gap
    tpot_ms: Percentiles | None  # per request: (last token - first token) / (output tokens - 1)
    e2e_sent_ms: Percentiles | None  # done - send (done - intended is the point's latency_ms)
    output_tokens_per_s: float  # the server's output token count over the measured window
    input_tokens_per_s: float
    user_tokens_per_s_p50: float | None  # per request: output tokens / (done - first token), its median
    goodput_rps: float | None = None  # requests meeting the SLO's ttft_ms, tpot_ms and e2e_ms per second (None: no such SLO)
    goodput_share: float | None = None  # their share of all the measured requests (failed ones miss): the attainment
    goodput_requests: int | None = None  # how many met them
    goodput_of: int | None = None  # of how many measured requests
    goodput_ci: tuple[float, float] | None = None  # 95% Wilson interval of the share
    output_tokens_asked: int = 0
    output_tokens_server: int = 0  # the server's usage counts, summed
    output_tokens_client: int = 0  # the client tokenizer's count of the text received, summed
    token_events: int = 0  # stream events that carried text
    mismatched_requests: int = 0  # requests whose counts disagree (see follower/loadgen/llmstats.py)
    buffered_requests: int = 0  # streams whose token events all arrived in one read
    server: LlmServerView | None = None  # the server's own view of the same run (its Prometheus metrics)
    sessions: SessionFigures | None = None  # llm.sessions: per turn index and per session
    items_per_s: float | None = None  # llm.api embeddings: texts embedded per second (answered requests x their inputs)
    prompt_rendering_tokens: int | None = None  # images, Messages, Responses: every prompt counted this much longer


class Reason(BaseModel):
    """One rule a point breaks: a stable code and a sentence a user can act on."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    code: ReasonCode
    text: str


# How reasons stored as plain text (before codes) are read back: the first phrase found decides the code.
_LEGACY_PHRASES: tuple[tuple[str, ReasonCode], ...] = (
    ("no request was sent", "no_requests"),
    ("in-flight cap was reached", "cap_reached"),
    ("send lag", "send_lag"),
    ("achieved rate", "rate_missed"),
    ("requests completed", "too_few"),
    ("load generator used", "generator_saturated"),
    ("load generator", "generator_capacity"),
    ("dropped", "dropped"),
    ("could not keep up", "server_saturated"),
    ("requests failed", "errors"),
    ("not running", "server_not_running"),
    ("died", "server_died"),
    ("not stable", "unstable"),
    ("unsteady", "unsteady"),
    ("no rate in", "search_failed"),
)


def legacy_reason(text: str) -> Reason:
    """A reason stored as text only, with the code its wording gives."""
    code: ReasonCode = next((code for phrase, code in _LEGACY_PHRASES if phrase in text), "other")
    return Reason(code=code, text=text)


class ShardRun(BaseModel):
    """One follower's share of a sharded point: its own seeded sub-stream of the arrivals, started at the common
    instant. Its clock offset to the leader is the best of several round trips, with half that round trip as its
    uncertainty; its start lag is how late its first request went out against its intended time."""

    shard: int
    follower_id: str | None
    state: Literal["merged", "lost", "absent"]  # merged; lost mid-point (its records never came); absent at the start
    requests: int  # the requests of its sub-stream
    offset_ms: float | None = None
    offset_uncertainty_ms: float | None = None
    start_lag_ms: float | None = None
    reason: str | None = None


class NetworkResult(BaseModel):
    """The network conditions a point ran under (a job's `network`) and what was measured under them."""

    profile: str
    delay_ms: float  # each way
    jitter_ms: float
    loss_pct: float  # each way
    rate_mbit: float | None  # each way; None: not limited
    rtt_ms: float | None  # median TCP handshake to the server under the conditions (None: not measured)
    tcp_retransmits: int = 0  # segments retransmitted during the point, both ends (the follower's side host-wide)


# stages_ms's total (the mean service time), beside the disjoint stages that sum to it.
SERVICE_TOTAL = "service"
# The stages in the order a request passes them (a server's processors around its own stages; then the wire).
STAGE_ORDER = ("preprocess", "decode", "queue", "infer", "encode", "postprocess", "transmission")


class PointResult(BaseModel):
    """One measured point. Latency counts from the *intended* send time; service time from the actual send."""

    model_config = ConfigDict(extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _reasons_from_text(cls, data: Any) -> Any:
        """Results stored before reasons had codes carry `invalid_reasons` (texts) only: read them as reasons."""
        if isinstance(data, dict) and "invalid_reasons" in data:
            data = dict(data)
            texts = data.pop("invalid_reasons")
            if "reasons" not in data:
                data["reasons"] = [legacy_reason(str(t)) for t in texts or []]
        return data

    @computed_field  # type: ignore[prop-decorator]  # pydantic's documented form; mypy objects to decorated properties
    @property
    def invalid_reasons(self) -> list[str]:
        """The reasons' texts, as every view shows them (and as stored documents always carried them)."""
        return [r.text for r in self.reasons]

    @property
    def judged_invalid(self) -> bool:
        """Benchfleet judged it invalid (an imported point is not judged at all: charts show it unringed)."""
        return not self.valid and self.imported is None

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
    conversion: Conversion | None = None  # the model as served was converted from the user's upload
    valid: bool
    reasons: list[Reason] = []
    slo_met: bool | None = None
    environment: Environment
    # Measurement-core detail (defaults keep results stored before these existed valid).
    generator_cpu_share: float | None = None  # generator process CPU / wall (1.0 = one core)
    loop_lag_ms: Percentiles | None = None  # event-loop lag of the generator
    latency_ci_ms: dict[str, tuple[float, float]] | None = None  # 95% CIs of p50/p99 latency (block bootstrap)
    latency_hdr: str | None = None  # latency-from-intended HDR histogram (ns), common.stats.encode; mergeable
    service_hdr: str | None = None
    # Mean ms per stage of a request's service time, in the order a request passes them (STAGE_ORDER), and their sum
    # under SERVICE_TOTAL: the stages are disjoint and add up to it.
    stages_ms: dict[str, float] | None = None
    # Client-side processing per request (ms): "preprocess" done once before the run, since bodies are pre-encoded;
    # "postprocess" timed on up to 16 sample answers after the run (follower/point/postprocess.py). Neither is in the
    # service time; None when none ran on the client (e.g. processing: server).
    client_stages_ms: dict[str, float] | None = None
    capped: int = 0  # requests that found the in-flight cap reached at their time (waited or dropped)
    in_flight_cap: int | None = None  # the cap in force (the spec's, or the one that followed the load); None: closed
    dropped: int = 0
    windows: list[WindowStat] = []
    stable: bool | None = None  # last windows agree on throughput and p99 (None: too few windows)
    search: SearchAnswer | None = None  # a search point: the answer, its interval and every probe
    generators: int = 1
    generator_plan: GeneratorPlan | None = None  # open loop: the count's reason (None: closed loop, or older results)
    # The generator thread's scheduling: "fifo", or "nice N (SCHED_FIFO refused: errno; the rule)"; None: not recorded
    generator_scheduling: str | None = None
    # When requests left (follower/loadgen/timing.py), in words: the timer, how far ahead it woke, the share spent spinning
    generator_timer: str | None = None
    # The CPUs' wake-up latency during the point: "held at 0 µs (/dev/cpu_dma_latency)" or "not held: why"
    cpu_wakeup_latency: str | None = None
    # What else held the CPUs while the point ran: hypervisor steal (share of all CPU time, /proc/stat) and the share
    # of the run the generator thread waited for its core (schedstat); None where the host does not say.
    host_steal_share: float | None = None
    generator_run_queue_share: float | None = None
    resources: Resources | None = None
    server_stats: ServerStats | None = None  # the server's own counters (None: it keeps none, e.g. TF Serving)
    llm: LlmFigures | None = None  # a language model's point
    network: NetworkResult | None = None  # the shaped link it ran over (a job's `network`); None: the plain link
    shards: list[ShardRun] | None = None  # a sharded point (target.shards): each follower's part of the load
    shard_skew_ms: float | None = None  # the spread of the shards' start lags (a point past 1 ms is flagged)
    wire: WireAudit | None = None  # the job's `audit: wire`: the client's clock against the wire
    quality: Quality | None = None  # the job's `quality:` checks on this point's server, after its load
    imported: ImportedFrom | None = None  # measured by another tool and imported: its definitions; no verdict of ours
