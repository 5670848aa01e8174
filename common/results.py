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


class SearchStep(BaseModel):
    """One probe of the highest-rate search: the rate tried and what it gave."""

    model_config = ConfigDict(extra="forbid")

    rate: float
    valid: bool
    slo_met: bool | None
    p99_ms: float | None = None
    achieved_rate: float = 0.0


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
    """How many generator processes a point ran and why: needed cores = target rate x CPU per request."""

    model_config = ConfigDict(extra="forbid")

    processes: int
    cores_needed: float  # rate x the follower's learned CPU seconds per request
    cores_available: int  # cores given to the generator (follower.host.cpuplan)
    cpu_per_request_us: float
    forced: bool = False  # the operator's follower setting `generators` chose the count
    saturated: bool = False  # more cores were needed than available: the point is invalid
    reason: str


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
    # Measurement-core detail (defaults keep results stored before these existed valid).
    generator_cpu_share: float | None = None  # generator process CPU / wall (1.0 = one core)
    loop_lag_ms: Percentiles | None = None  # event-loop lag of the generator
    latency_ci_ms: dict[str, tuple[float, float]] | None = None  # 95% CIs of p50/p99 latency (block bootstrap)
    latency_hdr: str | None = None  # latency-from-intended HDR histogram (ns), common.stats.encode; mergeable
    service_hdr: str | None = None
    stages_ms: dict[str, float] | None = None  # mean per stage; sums to the mean service time
    # Client-side processing per request (ms, e.g. {"preprocess": ...}): done once before the run, since bodies are
    # pre-encoded, so it is not in the service time; None when none ran on the client (e.g. processing: server).
    client_stages_ms: dict[str, float] | None = None
    capped: int = 0  # requests that found max_concurrency in flight at their time (waited or dropped)
    dropped: int = 0
    windows: list[WindowStat] = []
    stable: bool | None = None  # last windows agree on throughput and p99 (None: too few windows)
    search: list[SearchStep] | None = None
    generators: int = 1
    generator_plan: GeneratorPlan | None = None  # open loop: the count's reason (None: closed loop, or older results)
    # The generator thread's scheduling: "fifo", or "nice N (SCHED_FIFO refused: errno; the rule)"; None: not recorded
    generator_scheduling: str | None = None
    # The CPUs' wake-up latency during the point: "held at 0 µs (/dev/cpu_dma_latency)" or "not held: why"
    cpu_wakeup_latency: str | None = None
    # What else held the CPUs while the point ran: hypervisor steal (share of all CPU time, /proc/stat) and the share
    # of the run the generator thread waited for its core (schedstat); None where the host does not say.
    host_steal_share: float | None = None
    generator_run_queue_share: float | None = None
    resources: Resources | None = None
    server_stats: ServerStats | None = None  # the server's own counters (None: it keeps none, e.g. TF Serving)
