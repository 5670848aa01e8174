"""Response shapes of the analysis API: leaderboard rows, recommendations, comparisons and outliers."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from common.spec.job import load_label
from common.wire.auth import DEFAULT_TEAM


class LeaderboardRow(BaseModel):
    """One benchmark point as a leaderboard row; a measurement that was not taken is None (shown as "—")."""

    id: str  # "<job_id>:<point index>"
    job_id: str
    job_name: str
    attempt: int
    index: int
    model: str
    tags: list[str] = []  # the model's tags (the repository's, kept up to date on the row)
    backend: str
    hardware: str
    follower_id: str
    batch_size: int
    pattern: str
    rate: float  # req/s offered; 0 for a closed loop, whose load is its users
    concurrency: int | None = None  # a closed loop's users
    load: str = ""  # the load as shown: "200 req/s" or "16 users"
    repeat: int = 0  # which run of its configuration this point is (a spec's `repeats`), from 0
    options: str = ""  # the server options that differ from the defaults (JSON), "" for none
    role: str = ""  # a co-location point's: the model it measured, alone or beside which ("" otherwise)
    throughput: float | None = None  # requests/s the server delivered
    samples_per_s: float | None = None  # throughput x batch size (None on rows stored before it)
    p50_ms: float | None = None
    p99_ms: float | None = None
    p99_ci_high_ms: float | None = None  # upper end of the p99's 95% CI (None: no CI recorded)
    service_p99_ms: float | None = None
    requests: int = 0
    errors: int = 0
    valid: bool = False
    invalid_reasons: list[str] = []  # why the point is invalid, as the judge said ([] on rows stored before it)
    imported: str | None = None  # the tool that measured it, when imported (then not judged; None: benchfleet's own)
    slo_p99_ms: float | None = None
    slo_met: bool | None = None
    cost_usd_per_1m: float | None = None
    energy_wh_per_1m: float | None = None
    co2_g_per_1m: float | None = None
    gpu_util: float | None = None
    started_at: str | None = None
    # A canonical model's hyper-parameters and cost per inference (None for other models and for older rows).
    kind: str | None = None
    depth: int | None = None
    width: int | None = None
    input_size: int | None = None
    flops_per_inference: float | None = None
    bytes_per_inference: float | None = None
    # A language model's figures (None for tensor models and for older rows).
    ttft_p99_ms: float | None = None  # time to first token, from the intended time
    ttft_p99_ci_high_ms: float | None = None  # upper end of its 95% CI (block bootstrap)
    tpot_p99_ms: float | None = None  # time per output token
    itl_p99_ms: float | None = None  # inter-token latency
    tokens_per_s: float | None = None  # output tokens the server counted, per second
    goodput_rps: float | None = None  # requests/s meeting the TTFT, TPOT and e2e SLOs
    goodput_share: float | None = None  # their share of the requests (the attainment)
    cost_usd_per_1m_tokens: float | None = None  # per 1M output tokens, at the follower's instance price
    energy_j_per_1k_tokens: float | None = None  # where the follower measures energy
    # The served model's top-1 accuracy against the job's labelled data (a job's `quality:`), 0..1, with its 95%
    # interval and sample count (None without a quality check, and on older rows).
    accuracy: float | None = None
    accuracy_low: float | None = None
    accuracy_high: float | None = None
    accuracy_samples: int | None = None
    quality_floor_met: bool | None = None  # met its job's quality floor (quality.min_accuracy); None: the job set none
    # A search point (its rate or users are the load found): the lowest failing load, how it stopped, its probes.
    search_lowest_fail: float | None = None
    search_stopped: str | None = None
    search_probes: int | None = None
    best: bool = False  # the valid point of its model serving the most samples/s that meets its SLO
    team: str = DEFAULT_TEAM  # the job's team (only it and admins see the row)

    @model_validator(mode="after")
    def _label_the_load(self) -> LeaderboardRow:
        # Rows stored before the label existed get it from what they have.
        if not self.load:
            self.load = load_label(self.pattern, self.rate, self.concurrency)
        return self


class LeaderboardPage(BaseModel):
    """One page of the sorted, filtered leaderboard."""

    rows: list[LeaderboardRow]
    total: int
    # False when a filtered total was counted only so far (leader.analysis.leaderboard.COUNT_BUDGET): at least `total`.
    total_exact: bool = True
    sort: str
    order: Literal["asc", "desc"]
    filters: list[str]
    limit: int
    offset: int


class RecommendQuery(BaseModel):
    """What a team asks the recommender: its SLO (a p99 latency, or a language model's TTFT and TPOT p99s), the
    traffic to carry (requests/s, samples/s or output tokens/s) and an optional budget."""

    model_config = ConfigDict(extra="forbid")

    p99_ms: Annotated[float, Field(gt=0)] | None = None
    ttft_ms: Annotated[float, Field(gt=0)] | None = None  # a language model's time to first token, its p99
    tpot_ms: Annotated[float, Field(gt=0)] | None = None  # its time per output token, p99
    min_throughput: Annotated[float, Field(ge=0)] | None = None  # requests/s
    min_samples_per_s: Annotated[float, Field(ge=0)] | None = None
    min_tokens_per_s: Annotated[float, Field(ge=0)] | None = None  # output tokens/s
    max_cost: Annotated[float, Field(ge=0)] | None = None  # per 1M requests
    max_cost_per_1m_tokens: Annotated[float, Field(ge=0)] | None = None  # per 1M output tokens
    model: Annotated[str, Field(max_length=200)] | None = None
    # The least top-1 accuracy (0..1) a configuration's answers must score on its labelled data (a job's `quality:`);
    # a point never scored fails it. `confident` holds it at the lower end of the accuracy's 95% interval.
    min_accuracy: Annotated[float, Field(ge=0, le=1)] | None = None
    # Or within this much (0..1: 0.01 is one point) of the most accurate score any point of the same model reached.
    max_accuracy_drop: Annotated[float, Field(ge=0, le=1)] | None = None
    confident: bool = False  # hold the p99 and TTFT limits at the upper end of their 95% CIs (accuracy: its lower end)

    @model_validator(mode="after")
    def _an_slo(self) -> RecommendQuery:
        if self.p99_ms is None and self.ttft_ms is None and self.tpot_ms is None:
            raise ValueError("p99_ms, or for a language model ttft_ms and/or tpot_ms, is required: the SLO to meet")
        return self

    @property
    def llm(self) -> bool:
        """A language model's question: ranked by output tokens/s."""
        return any(v is not None for v in (self.ttft_ms, self.tpot_ms, self.min_tokens_per_s, self.max_cost_per_1m_tokens))

    def accuracy_floor(self) -> str:
        """The accuracy floor in words."""
        floors = [f"top-1 accuracy >= {100 * self.min_accuracy:g}%"] if self.min_accuracy is not None else []
        if self.max_accuracy_drop is not None:
            floors.append(f"accuracy within {100 * self.max_accuracy_drop:g} points of the model's most accurate")
        return " and ".join(floors)

    def describe(self) -> str:
        """The question in words."""
        parts = [
            f"{name} p99 <= {limit:g} ms"
            for name, limit in (("latency", self.p99_ms), ("TTFT", self.ttft_ms), ("TPOT", self.tpot_ms))
            if limit is not None
        ]
        parts += [
            f">= {v:g} {unit}"
            for v, unit in (
                (self.min_throughput, "req/s"),
                (self.min_samples_per_s, "samples/s"),
                (self.min_tokens_per_s, "output tokens/s"),
            )
            if v is not None
        ]
        parts += [
            f"<= {v:g} per 1M {what}"
            for v, what in ((self.max_cost, "requests"), (self.max_cost_per_1m_tokens, "output tokens"))
            if v is not None
        ]
        if self.min_accuracy is not None or self.max_accuracy_drop is not None:
            parts.append(self.accuracy_floor())
        held = " (held at the CIs' ends)" if self.confident else ""
        return ", ".join(parts) + held + (f", model {self.model}" if self.model else "")


class Recommendation(BaseModel):
    """One recommended configuration with the measured point that backs it."""

    rank: int
    model: str
    backend: str
    hardware: str
    batch_size: int
    options: str = ""  # its server options beyond the defaults (a sweep's configuration)
    throughput: float  # requests/s
    samples_per_s: float  # what a tensor model's ranking reads: throughput x batch size
    p99_ms: float | None
    p99_ci_high_ms: float | None
    cost_usd_per_1m: float | None
    # A language model's: what its ranking reads (output tokens/s), its TTFT and TPOT p99, cost per 1M output tokens.
    tokens_per_s: float | None = None
    ttft_p99_ms: float | None = None
    ttft_p99_ci_high_ms: float | None = None
    tpot_p99_ms: float | None = None
    cost_usd_per_1m_tokens: float | None = None
    energy_j_per_1k_tokens: float | None = None
    accuracy: float | None = None  # top-1 accuracy of its answers (a job's `quality:`), with its 95% interval
    accuracy_low: float | None = None
    accuracy_high: float | None = None
    evidence: LeaderboardRow
    candidates: int  # valid points of this configuration that met the constraints


class RecommendResponse(BaseModel):
    """The top configurations (at most 3) meeting the query, most work served first; or, with none, what to run."""

    query: RecommendQuery
    recommendations: list[Recommendation]
    considered: int  # points that met every constraint
    missing: str | None = None  # with no recommendation: which constraint no point met, the closest, and what to run


# "invalid": a side's point is invalid (common/wire/results.py: its reasons), so its figures decide nothing; "missing":
# the point is on one side only.
# not_judged: a side was measured by another tool and imported, and the compare did not opt in (include_imported).
Verdict = Literal["regression", "improvement", "unchanged", "invalid", "missing", "not_judged"]


LlmMetric = Literal["ttft_p99_ms", "tpot_p99_ms", "itl_p99_ms", "tokens_per_s"]


class MetricComparison(BaseModel):
    """A language model's figure of B against the same point of A: a p99 (TTFT, TPOT, ITL; lower is better) or output
    tokens/s (higher is better)."""

    metric: LlmMetric
    a: float | None
    b: float | None
    change: float | None  # (b - a) / a
    ci_low: float | None  # 95% block-bootstrap CI of b - a (ms, or tokens/s); None without both points' raw records
    ci_high: float | None
    verdict: Verdict


class QualityComparison(BaseModel):
    """The served model's top-1 accuracy on B's point against A's (a job's `quality:`; higher is better). Judged on its
    own: it was measured after the load, one request at a time, so a point the load made invalid still has it."""

    metric: Literal["top1_accuracy"] = "top1_accuracy"
    a: float  # 0..1
    b: float
    a_samples: int
    b_samples: int
    change: float  # b - a, in share points (-0.01: one point lower)
    ci_low: float  # 95% interval of b - a (Newcombe's, from each side's Wilson interval)
    ci_high: float
    verdict: Verdict


class PointComparison(BaseModel):
    """One point of B against the same point (backend, batch, pattern, rate) of A."""

    key: str
    a_index: int | None
    b_index: int | None
    a_p99_ms: float | None
    b_p99_ms: float | None
    change: float | None  # (b - a) / a of p99
    ci_low: float | None  # block-bootstrap 95% CI of (p99_b - p99_a), ms; None without raw records
    ci_high: float | None
    p_value: float | None  # two-sided Mann-Whitney U on the raw latencies
    test: Literal["bootstrap+mannwhitney", "summary"]
    verdict: Verdict
    llm: list[MetricComparison] = []  # a language model's TTFT, TPOT and ITL p99 and output tokens/s
    # Whether the two points can be compared at all (common/wire/repro.py): "comparable", or "not comparable: kernel,
    # packages" naming what differs (the configuration hash, or an environment fact); None where one side is missing.
    comparable: str | None = None
    # Each side's verdict on its own measurement (None: the side has no such point) and why it is invalid: an invalid
    # side makes the comparison's verdict "invalid", whatever its figures say.
    a_valid: bool | None = None
    b_valid: bool | None = None
    a_reasons: list[str] = []
    b_reasons: list[str] = []
    quality: QualityComparison | None = None  # both sides scored their answers (a job's `quality:`)
    # A side measured by another tool (imported): which tool (None: benchfleet), and what its figures are — its
    # definitions, benchfleet's recomputation and how far it moved each figure, where the tool fell behind.
    a_tool: str | None = None
    b_tool: str | None = None
    definitions: list[str] = []


class CompareResponse(BaseModel):
    """Job B against job A (or A's pinned baseline), point by point."""

    a: str
    b: str
    threshold: float
    quality_threshold: float = 0.005  # the fall in top-1 accuracy that counts (share points: 0.005 is half a point)
    points: list[PointComparison]
    regressions: int  # regressions between valid points only
    invalid: int = 0  # points not judged because a side's point is invalid
    not_judged: int = 0  # points not judged because a side was imported and the compare did not opt in
    include_imported: bool = False  # imported sides were judged by their own (or recomputed) figures


class FollowerOutlier(BaseModel):
    """One follower's figure for a point key against its class: the median, the median absolute deviation (MAD) and
    the robust z-score 0.6745 · (value − median) / MAD (Iglewicz and Hoaglin's modified z-score)."""

    follower_id: str
    job_id: str
    key: str
    metric: str  # p50_ms or p99_ms
    value_ms: float
    median_ms: float
    mad_ms: float  # floored at MAD_FLOOR of the median: equal machines are never infinitely far apart
    z: float
    deviation: float  # (value - median) / median
    outlier: bool  # z beyond the z limit and slower than the median by more than the threshold


class OutlierResponse(BaseModel):
    """The same job run on several followers: which follower is anomalous, with the evidence."""

    name: str
    metric: str
    threshold: float  # the least relative slowdown that counts
    z_limit: float
    followers: list[str]
    points: list[FollowerOutlier]
    outliers: list[str]


class HistoryOutlier(BaseModel):
    """A follower against its own past fleet checks: its latest figure, the median and MAD of the ones before."""

    follower_id: str
    key: str
    value_ms: float
    history: list[float]  # the earlier checks' figures, oldest first
    median_ms: float
    z: float
    outlier: bool


class Anomaly(BaseModel):
    """Why a follower is marked anomalous: the fleet check that found it and its evidence, in words and figures."""

    check_id: str
    since: datetime
    evidence: str
    drained: bool = False  # drained for it (the leader's fleetcheck_drain setting)


class FleetCheckView(BaseModel):
    """A fleet check: one fixed benchmark pinned to every follower of a hardware class, then a robust outlier test
    across them and against each one's own history."""

    id: str
    created_at: datetime
    model_ref: str
    hardware: str | None  # the class filter given (a substring of the CPU model or GPU name); None: every follower
    jobs: dict[str, str]  # follower id -> job id
    # The first round's suspects, each re-run alone before it is marked: follower id -> that job's id. When done, the
    # tests below hold each re-run figure in place of its first.
    recheck: dict[str, str] = {}
    state: Literal["running", "done"]
    across: OutlierResponse | None = None  # when done
    history: list[HistoryOutlier] = []
    outliers: list[str] = []  # followers marked: flagged by either test, or without a figure even when re-run alone
    no_figure: dict[str, str] = {}  # follower id -> why it gave no figure (its job failed, was cancelled, ...)
