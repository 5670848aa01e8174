"""The configuration recommender: the best measured configurations that meet a query (common.wire.analysis
RecommendQuery: an SLO, a traffic target, a budget) with their evidence, or when none does, why and what to run."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pydantic import ValidationError

from common.errors import InvalidRequest, field_errors
from common.wire.analysis import Recommendation, RecommendQuery, RecommendResponse
from leader.analysis.leaderboard import to_row
from leader.store.rowbest import run_key, samples_per_s

TOP = 3
INF = float("inf")


def parse_query(params: dict[str, Any]) -> RecommendQuery:
    """A query from request parameters (None: not given); InvalidRequest naming the parameter that is wrong."""
    try:
        return RecommendQuery.model_validate({k: v for k, v in params.items() if v is not None})
    except ValidationError as exc:
        first = field_errors(exc)[0]
        raise InvalidRequest(first["message"], field=first["field"] or "p99_ms") from None


def config_key(row: dict[str, Any]) -> tuple[str, str, str, int, str]:
    """A configuration: the same model on the same backend, hardware and server options at the same batch size."""
    return (row["model"], row["backend"], row["hardware"], row["batch_size"], row.get("options") or "")


def rank_key(row: dict[str, Any], query: RecommendQuery) -> tuple[float, float, float, str]:
    """The most work served first: output tokens/s for a language model's question, else samples/s (requests/s alone
    undervalues larger batches); then cheaper, then faster; the id makes ties deterministic."""
    if query.llm:
        cost = row.get("cost_usd_per_1m_tokens")
        return (-(row.get("tokens_per_s") or 0.0), INF if cost is None else cost, row.get("ttft_p99_ms") or INF, row["_id"])
    cost = row.get("cost_usd_per_1m")
    return (-(samples_per_s(row) or 0.0), INF if cost is None else cost, row.get("p99_ms") or INF, row["_id"])


def _within(value: float | None, limit: float | None) -> bool:
    return limit is None or (value is not None and value <= limit)


def meets_slo(row: dict[str, Any], query: RecommendQuery) -> bool:
    """Valid and within every latency limit asked. `confident`: the p99 and TTFT p99 at the upper end of their 95% CIs,
    so a point that met the SLO by the luck of its run is not recommended (a point without a CI cannot qualify then;
    TPOT keeps no CI and is held at its estimate)."""
    if not row.get("valid") or row.get("throughput") is None:
        return False
    if query.model is not None and row["model"] != query.model:
        return False
    p99 = row.get("p99_ci_high_ms") if query.confident else row.get("p99_ms")
    ttft = row.get("ttft_p99_ci_high_ms") if query.confident else row.get("ttft_p99_ms")
    return _within(p99, query.p99_ms) and _within(ttft, query.ttft_ms) and _within(row.get("tpot_p99_ms"), query.tpot_ms)


def carries(row: dict[str, Any], query: RecommendQuery) -> bool:
    """Serves the traffic asked: requests/s, samples/s, output tokens/s."""
    return (
        (query.min_throughput is None or row["throughput"] >= query.min_throughput)
        and (query.min_samples_per_s is None or (samples_per_s(row) or 0.0) >= query.min_samples_per_s)
        and (query.min_tokens_per_s is None or (row.get("tokens_per_s") or 0.0) >= query.min_tokens_per_s)
    )


def affordable(row: dict[str, Any], query: RecommendQuery) -> bool:
    """Within the budget (an unknown cost fails a cost limit)."""
    return _within(row.get("cost_usd_per_1m"), query.max_cost) and _within(
        row.get("cost_usd_per_1m_tokens"), query.max_cost_per_1m_tokens
    )


def accuracy_floors(rows: Iterable[dict[str, Any]], query: RecommendQuery) -> dict[str, float]:
    """Each model's accuracy floor: `min_accuracy`, and with `max_accuracy_drop` the most accurate score any of the
    model's rows reached less the drop (the higher of the two); a model none of whose rows was scored has no entry."""
    if query.min_accuracy is None and query.max_accuracy_drop is None:
        return {}
    best: dict[str, float] = {}
    for row in rows:
        if (accuracy := row.get("accuracy")) is not None:
            best[row["model"]] = max(best.get(row["model"], 0.0), accuracy)
    floors = {}
    for model, top in best.items():
        relative = top - query.max_accuracy_drop - 1e-12 if query.max_accuracy_drop is not None else 0.0
        floors[model] = max(query.min_accuracy or 0.0, relative)
    return floors


def accurate(row: dict[str, Any], query: RecommendQuery, floors: dict[str, float]) -> bool:
    """At least the model's accuracy floor (`accuracy_floors`; `confident`: the lower end of its 95% interval); a
    point whose answers were never scored fails a floor, as an unknown cost fails a budget."""
    if query.min_accuracy is None and query.max_accuracy_drop is None:
        return True
    accuracy = row.get("accuracy_low") if query.confident else row.get("accuracy")
    floor = floors.get(row["model"])
    return accuracy is not None and floor is not None and accuracy >= floor


def eligible(row: dict[str, Any], query: RecommendQuery, floors: dict[str, float]) -> bool:
    """A valid point that meets every constraint of the query, and its own job's quality floor where it set one."""
    if row.get("quality_floor_met") is False:
        return False
    return meets_slo(row, query) and accurate(row, query, floors) and carries(row, query) and affordable(row, query)


def recommend(rows: Iterable[dict[str, Any]], query: RecommendQuery, *, top: int = TOP) -> RecommendResponse:
    """The top configurations, each backed by its best point and the count of points that qualified; with none, the
    reason and what to run.

    A point run several times (a spec's `repeats`) qualifies only if every run does, and stands for its runs by the
    one that served the least: the luckiest of several runs is not evidence.
    """
    rows = list(rows)
    floors = accuracy_floors(rows, query)
    runs: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for row in rows:
        runs.setdefault(run_key(row), []).append(row)
    best: dict[tuple[Any, ...], dict[str, Any]] = {}
    counts: dict[tuple[Any, ...], int] = {}
    considered = 0
    for siblings in runs.values():
        if not all(eligible(row, query, floors) for row in siblings):
            continue
        considered += len(siblings)
        row = max(siblings, key=lambda r: rank_key(r, query))  # the run that ranks last stands for them
        key = config_key(row)
        counts[key] = counts.get(key, 0) + len(siblings)
        if key not in best or rank_key(row, query) < rank_key(best[key], query):
            best[key] = row
    chosen = sorted(best.values(), key=lambda r: rank_key(r, query))[:top]
    recs = [_recommendation(i + 1, row, counts[config_key(row)]) for i, row in enumerate(chosen)]
    return RecommendResponse(
        query=query,
        recommendations=recs,
        considered=considered,
        missing=None if recs else what_to_run(rows, query, floors),
    )


def _recommendation(rank: int, row: dict[str, Any], candidates: int) -> Recommendation:
    return Recommendation(
        rank=rank,
        model=row["model"],
        backend=row["backend"],
        hardware=row["hardware"],
        batch_size=row["batch_size"],
        options=row.get("options") or "",
        throughput=row["throughput"],
        samples_per_s=samples_per_s(row) or 0.0,
        p99_ms=row.get("p99_ms"),
        p99_ci_high_ms=row.get("p99_ci_high_ms"),
        cost_usd_per_1m=row.get("cost_usd_per_1m"),
        tokens_per_s=row.get("tokens_per_s"),
        ttft_p99_ms=row.get("ttft_p99_ms"),
        ttft_p99_ci_high_ms=row.get("ttft_p99_ci_high_ms"),
        tpot_p99_ms=row.get("tpot_p99_ms"),
        cost_usd_per_1m_tokens=row.get("cost_usd_per_1m_tokens"),
        energy_j_per_1k_tokens=row.get("energy_j_per_1k_tokens"),
        accuracy=row.get("accuracy"),
        accuracy_low=row.get("accuracy_low"),
        accuracy_high=row.get("accuracy_high"),
        evidence=to_row(row),
        candidates=candidates,
    )


def _where(row: dict[str, Any]) -> str:
    options = f" ({row['options']})" if row.get("options") else ""
    return f"{row['backend']}{options} on {row['hardware']}, batch {row['batch_size']}, at {row.get('load') or row['rate']}"


def _slo_yaml(query: RecommendQuery) -> str:
    limits = [f"{k}: {v:g}" for k, v in (("p99_ms", query.p99_ms), ("ttft_ms", query.ttft_ms), ("tpot_ms", query.tpot_ms)) if v]
    return "{" + ", ".join(limits) + "}"


def what_to_run(rows: list[dict[str, Any]], query: RecommendQuery, floors: dict[str, float]) -> str:
    """Not enough evidence: the first constraint no measured point passes, the closest point, and the job to run."""
    of = f" of model {query.model}" if query.model else ""
    valid = [r for r in rows if r.get("valid") and (query.model is None or r["model"] == query.model)]
    if query.llm:
        valid = [r for r in valid if r.get("ttft_p99_ms") is not None]
    kind = "language-model " if query.llm else ""
    search = f"run a search (load: {{search: {{low: ..., high: ...}}}}, slo: {_slo_yaml(query)})"
    if not valid:
        return f"not enough evidence: no valid {kind}point{of} in the history you can see; {search} to measure one"
    in_slo = [r for r in valid if meets_slo(r, query)]
    if not in_slo:

        def excess(r: dict[str, Any]) -> float:
            pairs = (
                (r.get("p99_ms"), query.p99_ms),
                (r.get("ttft_p99_ms"), query.ttft_ms),
                (r.get("tpot_p99_ms"), query.tpot_ms),
            )
            return max((v / limit for v, limit in pairs if limit and v is not None), default=INF)

        near = min(valid, key=excess)
        return (
            f"not enough evidence: none of {len(valid)} valid {kind}points{of} meets {query.describe()}; the closest, "
            f"{_where(near)}, is {100 * (excess(near) - 1):.0f}% over its limit: {search} on it to find the load "
            "where the SLO holds, or measure lower loads"
        )
    scored = [r for r in in_slo if accurate(r, query, floors)]
    if not scored:
        floor = query.accuracy_floor()
        measured = [r for r in in_slo if r.get("accuracy") is not None]
        if not measured:
            how = (
                "quality: {evaluation: {scorer: ...}} with an evaluation set (llm.dataset rows with answers)"
                if query.llm
                else "quality: {accuracy: {}} with labelled data (data: {source: upload, id: ...})"
            )
            return (
                f"not enough evidence: {len(in_slo)} points meet the SLO but none was scored for accuracy; add "
                f"{how} to the job and run it again"
            )
        best = max(measured, key=lambda r: r["accuracy"])
        return (
            f"not enough evidence: {len(in_slo)} points meet the SLO but none reaches {floor}; the most accurate, "
            f"{_where(best)}, scored {100 * best['accuracy']:.1f}% (95% interval {100 * best['accuracy_low']:.1f}-"
            f"{100 * best['accuracy_high']:.1f}%): lower the floor, or measure a more accurate configuration"
        )
    carried = [r for r in scored if carries(r, query)]
    if not carried:
        most = min(scored, key=lambda r: rank_key(r, query))
        served = f"{most.get('tokens_per_s') or 0:.1f} output tokens/s" if query.llm else f"{most['throughput']:.1f} req/s"
        return (
            f"not enough evidence: {len(scored)} points meet the SLO but none carries the traffic asked; the most, "
            f"{served}, was {_where(most)}: {search} to find the most each configuration carries within the SLO, or "
            "sweep its server options (sweep: {llm.max_num_seqs: [...]}) or measure other hardware"
        )
    cheapest = min(carried, key=lambda r: rank_key(r, query)[1])
    cost = rank_key(cheapest, query)[1]
    priced = "an unknown cost (no instance price set on its follower)" if cost == INF else f"{cost:.3g} per 1M"
    return (
        f"not enough evidence: {len(carried)} points meet the SLO and the traffic but none the budget; the cheapest, "
        f"{_where(cheapest)}, costs {priced}"
    )
