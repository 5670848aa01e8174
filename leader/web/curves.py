"""The charts a decision is made from: one line per configuration with the Pareto front (what each served against
what its users waited), and a search's probes against load with the limit and the load found."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from common.spec.slo import SLO
from common.wire.results import PointResult
from common.wire.search import SearchProbe
from leader.web.chartkit import Chart, Series, finite, line


def tokens_and(p: PointResult, attr: str) -> tuple[float | None, float | None]:
    figures = p.llm
    if figures is None:
        return None, None
    latency = getattr(figures, attr)
    return figures.output_tokens_per_s, latency.p99 if latency is not None else None


def pareto(pairs: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """The points no other beats on both counts (more served, less waited), in order of what they serve."""
    front: list[tuple[float, float]] = []
    for x, y in sorted(pairs, key=lambda xy: (-xy[0], xy[1])):
        if not front or y < front[-1][1]:
            front.append((x, y))
    return sorted(front)


def curves(
    title: str,
    lines: Mapping[str, list[PointResult]],
    xy: Any,
    *,
    xlabel: str,
    ylabel: str,
) -> Chart:
    """One line per configuration (x: what it served, y: what its users waited), invalid points ringed, and with
    several configurations the Pareto front of the valid points across them."""
    series: list[Series] = []
    flagged: list[list[bool]] = []
    for label, points in lines.items():
        pairs = [xy(p) for p in points]
        series.append((label, [x for x, _ in pairs], [y for _, y in pairs]))
        flagged.append([p.judged_invalid for p in points])
    valid = [xy(p) for points in lines.values() for p in points if not p.judged_invalid]
    front = pareto([(x, y) for x, y in valid if finite(x) and finite(y)])
    if len(lines) > 1 and front:
        series.append(("Pareto front", [x for x, _ in front], [y for _, y in front]))
        flagged.append([False] * len(front))
    # The front is a line through configurations' own marks: marks of its own would cover theirs.
    return line(title, series, xlabel=xlabel, ylabel=ylabel, flagged=flagged, bare=["Pareto front"])


def search_chart(p: PointResult, slo: SLO | None) -> Chart:
    """A search point's probes against the load: the p99 (or, for a language model's goodput search, the share of
    requests meeting the SLO) through every probe in load order, the failing ones ringed, the limit as a line and the
    load found marked."""
    answer = p.search
    assert answer is not None
    share = any(probe.attainment is not None for probe in answer.probes) and slo is not None and slo.per_request

    def figure(probe: SearchProbe) -> float | None:
        return probe.attainment if share else probe.p99_ms

    limit = (slo.attainment if share else slo.p99_ms) if slo is not None else None
    probes = sorted(answer.probes, key=lambda x: x.load)
    name = "attainment" if share else "p99"
    series: list[Series] = [(f"{name} at each probe", [x.load for x in probes], [figure(x) for x in probes])]
    flagged = [[not x.passed for x in probes]]
    if limit is not None and probes:
        series.append(("the SLO's limit", [probes[0].load, probes[-1].load], [limit, limit]))
        flagged.append([False, False])
    if answer.found is not None:
        at = next((figure(x) for x in answer.probes if x.load == answer.found), None)
        series.append((f"found: {answer.found:g} {answer.unit}", [answer.found], [at]))
        flagged.append([False])
    return line(
        f"Search #{p.point.index}: {name} against load ({answer.stopped.replace('_', ' ')}; ringed red: failed)",
        series,
        xlabel=f"offered load ({answer.unit})",
        ylabel="share of requests meeting the SLO" if share else "p99 ms",
        flagged=flagged,
        empty="no probe has a figure",
    )


def prefill_chart(index: int, ttft_ms: np.ndarray, prompt_tokens: np.ndarray) -> Chart:
    """A language-model point's TTFT against each request's prompt length: the prefill's cost per token, and the
    queueing above it."""
    known = prompt_tokens >= 0
    order = np.argsort(prompt_tokens[known], kind="stable")
    xs, ys = prompt_tokens[known][order].astype(float).tolist(), ttft_ms[known][order].tolist()
    return line(
        f"TTFT against prompt length, point #{index} (each request)",
        [("TTFT", xs, ys)],
        xlabel="prompt tokens (the server's count)",
        ylabel="TTFT ms (from the intended time)",
        lines=False,
        empty="no request's prompt length was counted",
    )


def server_charts(points: Sequence[PointResult]) -> list[Chart]:
    """A language-model point's server as its own gauges saw it, window by window (read once per window): its running
    batch and queue, its KV cache in use, and each window's inter-token latency against the batch it ran."""
    ts = {p.point.index: [w.t_s for w in p.windows] for p in points}
    xlabel = "seconds into the measured part"
    batch = [
        (f"#{p.point.index} {kind}", ts[p.point.index], [getattr(w, f"server_{kind}") for w in p.windows])
        for p in points
        for kind in ("running", "waiting")
    ]
    kv = [
        (
            f"#{p.point.index}",
            ts[p.point.index],
            [100 * w.kv_cache_usage if w.kv_cache_usage is not None else None for w in p.windows],
        )
        for p in points
    ]
    itl = [(f"#{p.point.index}", [w.server_running for w in p.windows], [w.itl_p50_ms for w in p.windows]) for p in points]
    silent = "the server's metrics give no {} (llama.cpp reports none of its KV cache)"
    return [
        line(
            "Timeline: the server's running batch and queue per window",
            batch,
            xlabel=xlabel,
            ylabel="requests",
            empty=silent.format("running batch"),
        ),
        line(
            "Timeline: KV-cache use per window",
            kv,
            xlabel=xlabel,
            ylabel="% of the KV cache in use",
            empty=silent.format("KV-cache use"),
        ),
        line(
            "ITL p50 against the server's running batch (each window)",
            itl,
            xlabel="requests running (the server's gauge, the window's mean)",
            ylabel="ITL p50 ms",
            lines=False,
            empty=silent.format("running batch"),
        ),
    ]


def goodput_chart(lines: Mapping[str, list[PointResult]], slo: SLO | None) -> Chart:
    """The share of requests meeting the SLO against the load offered, one line per configuration (a search's
    probes included, each at its own load), invalid points ringed, the SLO's attainment as a line."""
    series: list[Series] = []
    flagged: list[list[bool]] = []
    loads: list[float] = []
    for label, points in lines.items():
        pairs: list[tuple[float, float | None, bool]] = []
        for p in points:
            if p.search is not None:
                pairs += [(x.load, x.attainment, not x.passed) for x in p.search.probes if x.attainment is not None]
            elif p.llm is not None:
                pairs.append((p.offered_rate, p.llm.goodput_share, p.judged_invalid))
        pairs.sort(key=lambda t: t[0])
        loads += [x for x, _, _ in pairs]
        series.append((label, [x for x, _, _ in pairs], [y for _, y, _ in pairs]))
        flagged.append([f for _, _, f in pairs])
    if slo is not None and slo.per_request and loads:
        series.append(("the SLO's attainment", [min(loads), max(loads)], [slo.attainment, slo.attainment]))
        flagged.append([False, False])
    return line(
        "Goodput: share of requests meeting the SLO against offered load (one line per configuration; ringed red: invalid)",
        series,
        xlabel="offered load (req/s; a search's probes at theirs)",
        ylabel="share meeting the SLO",
        flagged=flagged,
        empty="no language-model point was judged against an SLO with TTFT, TPOT or e2e limits",
    )
