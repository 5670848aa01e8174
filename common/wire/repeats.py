"""Repeat runs of one configuration (a spec's `repeats`): the spread across its runs beside each run's own 95% CI,
and whether those CIs explain the spread.

Each run's block-bootstrap CI says how far its p50 and p99 could move by the luck of that run's requests alone. If
the runs measured the same thing, their differences stay within what those CIs allow: Cochran's Q (the runs'
squared distances from their precision-weighted mean, in units of each run's standard error, read off its CI) then
follows a chi-squared law with runs - 1 degrees of freedom. A Q that unlikely (p below 5%, split between the p50
and the p99: Bonferroni) says the runs differ by more than their requests explain: the machine (or the server)
changed between runs. On simulated runs of one unchanged machine the verdict says so in about 8% of configurations
(the block bootstrap's p99 intervals run ~10% narrow; tests/unit/common/test_repeats.py). A coefficient of variation
over 5% is flagged either way: with wide CIs (short runs, few requests) a large spread can still be luck, and the
verdict says which.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Literal

from pydantic import BaseModel

from common.wire.results import PointResult

CV_FLAG = 0.05  # a spread above 5% of the mean is flagged
ALPHA = 0.05  # the heterogeneity test's nominal false-alarm rate per configuration, split over the figures tested
TESTED = ("p50", "p99")  # the figures with a CI per run
Z95 = 1.959964  # a 95% CI spans this many standard errors either side

Metric = Literal["p50_ms", "p99_ms", "throughput"]
Verdict = Literal["repeatable", "noisy", "machine_changed", "too_few"]
LABEL: dict[str, str] = {"p50_ms": "p50", "p99_ms": "p99", "throughput": "req/s"}


class MetricSpread(BaseModel):
    """One figure across a configuration's runs."""

    metric: Metric
    values: list[float | None]  # per run, in run order (None: the run measured none)
    cis: list[tuple[float, float] | None]  # per run: its own 95% CI (None: none recorded; throughput has none)
    mean: float | None
    std: float | None  # sample standard deviation across runs
    cv: float | None  # std / mean
    cv_flagged: bool  # cv above CV_FLAG
    q: float | None = None  # Cochran's Q over the runs with a CI (None: fewer than two)
    p_value: float | None = None  # chance of a Q this large if only each run's own sampling differed
    exceeds_ci: bool | None = None  # p_value below ALPHA / len(TESTED): the runs' CIs do not explain their spread


class RepeatSummary(BaseModel):
    """A configuration run several times: its runs, each figure's spread, and the verdict."""

    config: int  # the configuration's place in the grid without repeats
    backend: str
    batch_size: int
    load: str
    runs: list[int]  # the points that are its runs, in run order
    invalid_runs: list[int]  # of those, the points whose own verdict is invalid
    metrics: list[MetricSpread]
    verdict: Verdict
    text: str


def _spread(metric: Metric, values: list[float | None], cis: list[tuple[float, float] | None]) -> MetricSpread:
    known = [v for v in values if v is not None]
    mean = std = cv = None
    if len(known) >= 2:
        mean = math.fsum(known) / len(known)
        std = math.sqrt(math.fsum((v - mean) ** 2 for v in known) / (len(known) - 1))
        cv = std / mean if mean > 0 else None
    spread = MetricSpread(
        metric=metric, values=values, cis=cis, mean=mean, std=std, cv=cv, cv_flagged=cv is not None and cv > CV_FLAG
    )
    paired = [(v, ci) for v, ci in zip(values, cis, strict=True) if v is not None and ci is not None]
    if len(paired) >= 2:
        # A zero-width CI (every resample agreed) still has the histogram's resolution: 0.1% of the value.
        weights = [1.0 / max((hi - lo) / (2 * Z95), 1e-3 * abs(v), 1e-9) ** 2 for v, (lo, hi) in paired]
        centre = math.fsum(w * v for w, (v, _) in zip(weights, paired, strict=True)) / math.fsum(weights)
        q = math.fsum(w * (v - centre) ** 2 for w, (v, _) in zip(weights, paired, strict=True))
        from scipy.stats import chi2  # here: scipy takes a while to import, and the CLI reads this module

        spread.q = q
        spread.p_value = float(chi2.sf(q, len(paired) - 1))
        spread.exceeds_ci = spread.p_value < ALPHA / len(TESTED)
    return spread


def _verdict(runs: int, metrics: Sequence[MetricSpread]) -> tuple[Verdict, str]:
    if runs < 2:
        return "too_few", "fewer than two runs measured it: no spread to judge"
    changed = [m for m in metrics if m.exceeds_ci]
    flagged = [m for m in metrics if m.cv_flagged]
    cvs = ", ".join(f"{LABEL[m.metric]} {100 * m.cv:.1f}%" for m in metrics if m.cv is not None)
    if changed:
        worst = min(changed, key=lambda m: m.p_value if m.p_value is not None else 1.0)
        return "machine_changed", (
            f"the runs differ by more than their own 95% CIs explain ({LABEL[worst.metric]}: p = {worst.p_value:.2g}): the "
            f"machine or the server changed between runs; spread (CV) {cvs}"
        )
    if flagged:
        return "noisy", (
            f"spread (CV) {cvs}, above {100 * CV_FLAG:g}% on {', '.join(LABEL[m.metric] for m in flagged)}, yet within what "
            "each run's CI allows: the runs are too short to pin the figure down (run longer or at a higher rate)"
        )
    return "repeatable", f"spread (CV) {cvs}, within {100 * CV_FLAG:g}% and within the runs' own CIs"


def summarize_repeats(results: Iterable[PointResult]) -> list[RepeatSummary]:
    """Per configuration with two or more runs among `results`, its spread and verdict (by configuration)."""
    by_config: dict[int, list[PointResult]] = {}
    for result in results:
        by_config.setdefault(result.point.config_index, []).append(result)
    out: list[RepeatSummary] = []
    for config, runs in sorted(by_config.items()):
        if len(runs) < 2:
            continue
        runs.sort(key=lambda r: (r.point.repeat, r.point.index))
        metrics = []
        for key in TESTED:
            values = [getattr(r.latency_ms, key) if r.latency_ms is not None else None for r in runs]
            cis = [tuple(r.latency_ci_ms[key]) if r.latency_ci_ms and key in r.latency_ci_ms else None for r in runs]
            metrics.append(_spread(f"{key}_ms", values, cis))  # type: ignore[arg-type]  # a Metric by construction
        metrics.append(_spread("throughput", [r.achieved_rate if r.ok else None for r in runs], [None] * len(runs)))
        measured = sum(1 for r in runs if r.latency_ms is not None)
        verdict, text = _verdict(measured, metrics)
        first = runs[0].point
        out.append(
            RepeatSummary(
                config=config,
                backend=first.backend,
                batch_size=first.batch_size,
                load=first.load_label(),
                runs=[r.point.index for r in runs],
                invalid_runs=[r.point.index for r in runs if not r.valid],
                metrics=metrics,
                verdict=verdict,
                text=text,
            )
        )
    return out
