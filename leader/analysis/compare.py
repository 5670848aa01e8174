"""Comparisons and regressions: job B against job A point by point (followers against each other: anomalies.py)."""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError
from scipy.stats import mannwhitneyu

from common.spec.job import load_label
from common.stats import block_bootstrap_diff_ci, block_bootstrap_rate_diff_ci, quantile
from common.wire.analysis import (
    CompareResponse,
    LlmMetric,
    MetricComparison,
    PointComparison,
    QualityComparison,
    Verdict,
)
from common.wire.repro import comparable_environments
from common.wire.results import Environment
from leader.analysis import crosstool
from leader.analysis.records import LlmSeries, Timed

DEFAULT_THRESHOLD = 0.10
DEFAULT_QUALITY_THRESHOLD = 0.005  # half a point of top-1 accuracy


@dataclass(frozen=True)
class Measured:
    """A point's raw records as compare resamples them: (intended ns, latency ms) of its answered requests, and a
    language model's series."""

    latency: Timed
    llm: LlmSeries | None = None


# Loads a row's raw records; None when none were kept.
LatencyLoader = Callable[[dict[str, Any]], Awaitable[Measured | None]]

# A language model's figures compared: the row's column and the raw series it is the p99 of (None: a rate).
LLM_METRICS: tuple[tuple[LlmMetric, str | None], ...] = (
    ("ttft_p99_ms", "ttft_ms"),
    ("tpot_p99_ms", "tpot_ms"),
    ("itl_p99_ms", "itl_ms"),
    ("tokens_per_s", None),
)


# What can tell two points of one job apart beyond backend, batch, pattern and load: the model (a co-location job's
# points measure several), the hardware class, the server options (a sweep over them) and the co-location role.
DIMENSIONS = ("model", "hardware", "options", "role")


def point_key(row: dict[str, Any], dims: Sequence[str] = ("options", "role")) -> str:
    """What makes two points the same experiment: backend, batch size, arrival pattern and load (rate or users), and
    each of `dims` the row has (by default the server options and co-location role, which followers running one spec
    share); with repeats, each run is compared with the other job's run of the same number."""
    load = load_label(row["pattern"], row["rate"], row.get("concurrency"))
    run = f"|run {row['repeat'] + 1}" if row.get("repeat") else ""
    extra = "".join(f"|{dim} {row[dim]}" for dim in dims if row.get(dim))
    return f"{row['backend']}|b{row['batch_size']}|{row['pattern']}|{load}{extra}{run}"


def varying(*jobs: list[dict[str, Any]]) -> tuple[str, ...]:
    """The dimensions that take more than one value inside some job: they must be in the key, or two of its points
    would be one. One a job holds constant is what a comparison of two jobs compares (A on one GPU, B on another)."""
    return tuple(dim for dim in DIMENSIONS if any(len({row.get(dim) or "" for row in rows}) > 1 for rows in jobs))


def judge(change: float | None, ci: tuple[float, float] | None, threshold: float, higher_is_better: bool = False) -> Verdict:
    """Regression: a latency grew (a rate fell) beyond the threshold and (with raw records) its CI excludes no change."""
    if change is None:
        return "missing"
    if higher_is_better:
        change, ci = -change, (None if ci is None else (-ci[1], -ci[0]))
    if change > threshold and (ci is None or ci[0] > 0):
        return "regression"
    if change < -threshold and (ci is None or ci[1] < 0):
        return "improvement"
    return "unchanged"


def compare_llm(
    ra: dict[str, Any], rb: dict[str, Any], ma: Measured | None, mb: Measured | None, threshold: float
) -> list[MetricComparison]:
    """A language model's TTFT, TPOT and ITL p99 and output tokens/s of B against A: from both points' raw records a
    block-bootstrap 95% CI of the difference (the p99s recomputed from the records), else the rows' figures."""
    if ra.get("ttft_p99_ms") is None or rb.get("ttft_p99_ms") is None:
        return []
    la = ma.llm if ma is not None else None
    lb = mb.llm if mb is not None else None
    out = []
    for column, series in LLM_METRICS:
        a, b = ra.get(column), rb.get(column)
        ci: tuple[float, float] | None = None
        if la is not None and lb is not None:
            if series is None:
                ci = block_bootstrap_rate_diff_ci((*la.tokens, la.window_s), (*lb.tokens, lb.window_s))
            else:
                (ta, va), (tb, vb) = getattr(la, series), getattr(lb, series)
                if len(va) and len(vb):
                    a, b = quantile(va, 0.99), quantile(vb, 0.99)
                    ci = block_bootstrap_diff_ci((ta, va), (tb, vb), 0.99)
        change = (b - a) / a if a and b is not None else None
        verdict = judge(change, ci, threshold, higher_is_better=series is None)
        low, high = ci if ci is not None else (None, None)
        out.append(MetricComparison(metric=column, a=a, b=b, change=change, ci_low=low, ci_high=high, verdict=verdict))
    return out


def compare_quality(ra: dict[str, Any], rb: dict[str, Any], threshold: float) -> QualityComparison | None:
    """B's top-1 accuracy against A's, when both points scored their answers: the difference with Newcombe's 95%
    interval (from each side's Wilson interval; it takes the two sides as independent samples, which errs wide when
    both scored the same data). A regression is a fall beyond `threshold` whose interval excludes no change."""
    keys = ("accuracy", "accuracy_low", "accuracy_high", "accuracy_samples")
    if any(ra.get(k) is None for k in keys) or any(rb.get(k) is None for k in keys):
        return None
    pa, la, ha = ra["accuracy"], ra["accuracy_low"], ra["accuracy_high"]
    pb, lb, hb = rb["accuracy"], rb["accuracy_low"], rb["accuracy_high"]
    change = pb - pa
    ci = (change - math.hypot(pb - lb, ha - pa), change + math.hypot(hb - pb, pa - la))
    return QualityComparison(
        a=pa,
        b=pb,
        a_samples=int(ra["accuracy_samples"]),
        b_samples=int(rb["accuracy_samples"]),
        change=change,
        ci_low=ci[0],
        ci_high=ci[1],
        verdict=judge(change, ci, threshold, higher_is_better=True),
    )


def comparability(ra: dict[str, Any] | None, rb: dict[str, Any] | None) -> str | None:
    """The "comparable?" verdict of two rows' reproducibility records (None: a side is missing, or a row stored before
    rows kept their environment)."""
    if not ra or not rb or not ra.get("environment") or not rb.get("environment"):
        return None
    try:
        a, b = Environment.model_validate(ra["environment"]), Environment.model_validate(rb["environment"])
    except ValidationError:
        return None
    return comparable_environments(a, b).verdict()


def side(row: dict[str, Any] | None, include_imported: bool = False) -> tuple[bool | None, list[str]]:
    """A side's verdict on its own point and why it is invalid (None: the side has no such point); an imported side
    counts as valid where the compare opted in to it."""
    if row is None:
        return None, []
    if row.get("valid") or (include_imported and row.get("imported")):
        return True, []
    return False, list(row.get("invalid_reasons") or []) or ["invalid (its reasons were stored before rows kept them)"]


async def compare_rows(
    a_rows: list[dict[str, Any]],
    b_rows: list[dict[str, Any]],
    *,
    a: str,
    b: str,
    load_latencies: LatencyLoader,
    threshold: float = DEFAULT_THRESHOLD,
    quality_threshold: float = DEFAULT_QUALITY_THRESHOLD,
    include_imported: bool = False,
) -> CompareResponse:
    """Match points by key and test each pair (raw latencies when both have records, else the summaries). A pair with
    an invalid side is shown with its figures and its reasons but judged "invalid": it decides no latency regression.
    Its accuracy (both sides scored with `quality:`) is judged all the same: it was measured after the load. A side
    another tool measured (imported) is keyed on pattern and load, figured by benchfleet's definitions where its records
    allowed (crosstool.py), and judged "not_judged" unless `include_imported`."""
    dims = varying(a_rows, b_rows)
    cross = crosstool.has_imported(a_rows, b_rows)
    key_of = crosstool.cross_key if cross else point_key
    a_by = {key_of(row, dims): crosstool.as_compared(row) for row in a_rows}
    b_by = {key_of(row, dims): crosstool.as_compared(row) for row in b_rows}
    out: list[PointComparison] = []
    for key in list(a_by) + [k for k in b_by if k not in a_by]:
        ra, rb = a_by.get(key), b_by.get(key)
        pa = ra.get("p99_ms") if ra else None
        pb = rb.get("p99_ms") if rb else None
        change = (pb - pa) / pa if pa and pb is not None else None
        ci: tuple[float, float] | None = None
        p_value: float | None = None
        metrics: list[MetricComparison] = []
        if ra is not None and rb is not None:
            ma, mb = await load_latencies(ra), await load_latencies(rb)
            metrics = compare_llm(ra, rb, ma, mb, threshold)
            ta, tb = (ma.latency if ma else None), (mb.latency if mb else None)
            # Block bootstrap over each run's intended time: slow answers come in bursts, and resampling single
            # requests called two runs of one bursty server different in 21 of 30 simulated pairs, blocks in 1
            # (tests/unit/common/test_stats.py).
            if ta is not None and tb is not None and (ci := block_bootstrap_diff_ci(ta, tb, 0.99)) is not None:
                la, lb = ta[1], tb[1]
                # Informational only (the verdict is the CI's): Mann-Whitney takes requests as independent.
                p_value = float(mannwhitneyu(la, lb, alternative="two-sided").pvalue)
                # From the raw records, by the estimator every figure uses (common/stats.py): the points' own p99s.
                pa, pb = quantile(la, 0.99), quantile(lb, 0.99)
                change = (pb - pa) / pa if pa else None
        (a_valid, a_reasons), (b_valid, b_reasons) = side(ra, include_imported), side(rb, include_imported)
        verdict = judge(change, ci, threshold)
        imported = bool((ra or {}).get("imported") or (rb or {}).get("imported"))
        if ra is not None and rb is not None and imported and not include_imported:
            verdict = "not_judged"
            metrics = [m.model_copy(update={"verdict": "not_judged"}) for m in metrics]
        elif ra is not None and rb is not None and (a_valid is False or b_valid is False):
            verdict = "invalid"
            metrics = [m.model_copy(update={"verdict": "invalid"}) for m in metrics]
        out.append(
            PointComparison(
                key=key,
                a_index=ra["index"] if ra else None,
                b_index=rb["index"] if rb else None,
                a_p99_ms=pa,
                b_p99_ms=pb,
                change=change,
                ci_low=ci[0] if ci else None,
                ci_high=ci[1] if ci else None,
                p_value=p_value,
                test="bootstrap+mannwhitney" if ci else "summary",
                verdict=verdict,
                llm=metrics,
                comparable=comparability(ra, rb),
                a_valid=a_valid,
                b_valid=b_valid,
                a_reasons=a_reasons,
                b_reasons=b_reasons,
                quality=compare_quality(ra, rb, quality_threshold) if ra is not None and rb is not None else None,
                a_tool=((ra or {}).get("imported") or {}).get("tool"),
                b_tool=((rb or {}).get("imported") or {}).get("tool"),
                definitions=crosstool.notes("A", ra) + crosstool.notes("B", rb),
            )
        )
    regressions = sum(p.verdict == "regression" for p in out) + sum(m.verdict == "regression" for p in out for m in p.llm)
    regressions += sum(p.quality is not None and p.quality.verdict == "regression" for p in out)
    invalid = sum(p.verdict == "invalid" for p in out)
    return CompareResponse(
        a=a,
        b=b,
        threshold=threshold,
        quality_threshold=quality_threshold,
        points=out,
        regressions=regressions,
        invalid=invalid,
        not_judged=sum(p.verdict == "not_judged" for p in out),
        include_imported=include_imported,
    )
