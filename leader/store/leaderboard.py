"""Leaderboard rows in PerfDB: one small flat document per (job, point index), the newest attempt's result.

Rows are denormalised from point results so the leaderboard never joins jobs and results. The leaderboard is read
from here page by page (leader.analysis.leaderboard): each sortable column has an index (team, column, id), the
rows' counts per sort bucket are kept beside them (leader.store.rowcounts) and each model's best point under SLO too
(leader.store.rowbest), all changed with the row by write_row and delete_rows.

A row is written with a `pending` mark that is removed once its counts and best are updated: a leader stopped in
between leaves the mark, and the next leader's start recounts everything (repair).

Every change to the rows ends with a new stamp (`restamp`): a page is cached under the stamp it was read at and
served from the cache only while the stamp is the same (leader.analysis.leaderboard). A database without a stamp (a
restored one, until its first write or leader start) is read afresh each time.
"""

from __future__ import annotations

import asyncio
import json
import uuid
import weakref
from dataclasses import dataclass
from typing import Any

from pymongo import ASCENDING
from pymongo.asynchronous.cursor import AsyncCursor
from pymongo.asynchronous.database import AsyncDatabase

from common.spec.job import load_label
from common.spec.server import ServerOptions
from common.wire.auth import DEFAULT_TEAM
from leader.store import rowbest, rowcounts
from leader.store.lookup import team_query

COLLECTION = "leaderboard"
STAMPS = "leaderboard_stamp"  # one document: the rows' stamp
BASELINES = "baselines"
PENDING = "pending"
# What a leaderboard page reads of a row (the reproducibility record is compare's: job_rows).
PAGE_FIELDS = {"environment": 0, PENDING: 0}
_locks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = weakref.WeakKeyDictionary()


@dataclass
class PointTally:
    """A job's stored points: how many, how many valid, how many valid and within its SLO (rowbest.meets_slo: the
    same test as the leaderboard's best-under-SLO)."""

    points: int = 0
    valid: int = 0
    slo_met: int = 0


async def ensure_indexes(db: AsyncDatabase) -> None:
    """Pages read a sort bucket's rows by (team, column, id); job pages by job_id; the outlier test by job name; a
    starting leader looks for rows left pending."""
    await db[COLLECTION].create_index([("job_id", ASCENDING), ("index", ASCENDING)])
    await db[COLLECTION].create_index([("job_name", ASCENDING)])
    await db[COLLECTION].create_index([(PENDING, ASCENDING)])
    for col in rowcounts.SORTABLE:
        await db[COLLECTION].create_index([("team", ASCENDING), (col, ASCENDING), ("_id", ASCENDING)])
    await rowcounts.ensure_indexes(db)


def _lock() -> asyncio.Lock:
    """Rows are written one at a time (per event loop: the leader has one), so two writers never count one row twice."""
    return _locks.setdefault(asyncio.get_running_loop(), asyncio.Lock())


async def write_row(db: AsyncDatabase, row: dict[str, Any]) -> None:
    """Store a row (replacing the point's earlier one), its counts and its model's best with it."""
    async with _lock():
        old = await db[COLLECTION].find_one({"_id": row["_id"]}, {"team": 1, **{c: 1 for c in rowcounts.SORTABLE}})
        await db[COLLECTION].replace_one({"_id": row["_id"]}, {**row, PENDING: True}, upsert=True)
        await rowcounts.count(db, old=old, new=row)
        await rowbest.written(db, COLLECTION, row)
        await db[COLLECTION].update_one({"_id": row["_id"]}, {"$unset": {PENDING: ""}})
        await restamp(db)


async def delete_rows(db: AsyncDatabase, *, row_ids: list[str]) -> None:
    """Delete rows, their counts and (where one of them was its model's best) find the best again."""
    if not row_ids:
        return
    async with _lock():
        query = {"_id": {"$in": row_ids}}
        await db[COLLECTION].update_many(query, {"$set": {PENDING: True}})
        old = await db[COLLECTION].find(query, {"team": 1, **{c: 1 for c in rowcounts.SORTABLE}}).to_list(None)
        await rowcounts.count_many(db, old=old, new=[])
        await db[COLLECTION].delete_many(query)
        await rowbest.deleted(db, COLLECTION, row_ids)
        await restamp(db)


async def recount(db: AsyncDatabase) -> int:
    """Every row's counts and every model's best found again from the rows; returns how many rows were counted."""
    async with _lock():
        counted = await rowcounts.rebuild(db, COLLECTION)
        await rowbest.rebuild(db, COLLECTION)
        await db[COLLECTION].update_many({PENDING: True}, {"$unset": {PENDING: ""}})
        await restamp(db)
        return counted


async def repair(db: AsyncDatabase) -> bool:
    """At start: a row left pending (a leader stopped while writing or deleting it) means the counts may be off by it:
    recount. Returns whether it did."""
    if await db[COLLECTION].find_one({PENDING: True}, {"_id": 1}) is None:
        return False
    await recount(db)
    return True


async def restamp(db: AsyncDatabase) -> None:
    """A new stamp for the rows: they changed (or a leader started and may have changed them), so no page cached
    under the old one is served again."""
    await db[STAMPS].replace_one({"_id": "rows"}, {"stamp": uuid.uuid4().hex}, upsert=True)


async def stamp(db: AsyncDatabase) -> str | None:
    """The rows' stamp (None: none yet, so nothing read may be cached)."""
    doc = await db[STAMPS].find_one({"_id": "rows"})
    return None if doc is None else str(doc["stamp"])


def find_rows(db: AsyncDatabase, query: dict[str, Any], fields: dict[str, int] | None = None) -> AsyncCursor[dict[str, Any]]:
    """A cursor over the rows matching a PerfDB query (without their reproducibility record unless `fields` asks)."""
    return db[COLLECTION].find(query, fields or PAGE_FIELDS).batch_size(2000)


def _int(value: float | None) -> int | None:
    return None if value is None else int(value)


def _num(doc: Any, *paths: str) -> float | None:
    """The first number found at one of the dotted paths (fields that other issues add may be absent)."""
    for path in paths:
        value = doc
        for part in path.split("."):
            value = value.get(part) if isinstance(value, dict) else None
            if value is None:
                break
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
    return None


def _wh_per_1m(joules_per_request: float | None) -> float | None:
    return None if joules_per_request is None else joules_per_request * 1e6 / 3600.0


def _ci_high(result: dict[str, Any], name: str) -> float | None:
    """The upper end of a latency percentile's confidence interval in a dumped result, or None without one."""
    ci = (result.get("latency_ci_ms") or {}).get(name)
    return float(ci[1]) if ci else None


def _samples(result: dict[str, Any], point: dict[str, Any]) -> float | None:
    """Samples (inputs) served per second: requests/s times the rows each request carries."""
    rate = _num(result, "achieved_rate")
    return None if rate is None else rate * int(point.get("batch_size") or 1)


def served_by(point: dict[str, Any], env: dict[str, Any]) -> str:
    """The device that served the point: its own GPU for a GPU-served point, else the host's CPU (a CPU-served point
    on a GPU host ran on the CPU, whatever GPUs the host has)."""
    server = ServerOptions.model_validate(point.get("server") or {})
    gpus = env.get("gpus") or []
    if server.uses_gpu and server.gpu_index < len(gpus):
        return str(gpus[server.gpu_index])
    return str(env.get("cpu_model") or "unknown")


def _ttft_ci_high(result: dict[str, Any]) -> float | None:
    ci = ((result.get("llm") or {}).get("ttft_ci_ms") or {}).get("p99")
    return float(ci[1]) if isinstance(ci, list | tuple) and len(ci) == 2 else None


def server_options(point: dict[str, Any]) -> str:
    """The point's server options that differ from the defaults, as stable text ("" for none): what tells apart the
    configurations of a sweep over them."""
    options = ServerOptions.model_validate(point.get("server") or {}).model_dump(mode="json", exclude_defaults=True)
    return json.dumps(options, sort_keys=True, separators=(",", ":")) if options else ""


def _role(point: dict[str, Any], names: list[str]) -> str:
    """A co-location point's role: the model it measured, alone or beside the others served with it."""

    def name(k: int) -> str:
        return names[k] if 0 <= k < len(names) else f"model {k}"

    served, beside = int(point.get("served") or 0), [int(b) for b in point.get("beside") or []]
    return f"{name(served)} " + (("beside " + ", ".join(name(b) for b in beside)) if beside else "alone")


def row_from_result(
    *,
    job_id: str,
    job_name: str,
    model: str,
    team: str = DEFAULT_TEAM,
    slo_p99_ms: float | None,
    attempt: int,
    result: dict[str, Any],
    canonical: dict[str, Any] | None = None,
    colocated: list[str] | None = None,
    tags: list[str] | None = None,
) -> dict[str, Any]:
    """A point result (as dumped JSON) flattened to a leaderboard row document (with the model's canonical params;
    `colocated`: a co-location job's other models, which name the point's role)."""
    canon = canonical or {}
    point = result.get("point", {})
    env = result.get("environment") or {}
    index = int(point.get("index", 0))
    started = result.get("started_at")
    return {
        "_id": f"{job_id}:{index}",
        "job_id": job_id,
        "job_name": job_name,
        "team": team,
        "attempt": attempt,
        "index": index,
        "model": model,
        "tags": list(tags or []),
        "backend": str(point.get("backend", "")),
        "hardware": served_by(point, env),
        "follower_id": str(env.get("follower_id", "")),
        "batch_size": int(point.get("batch_size", 0)),
        "pattern": str(point.get("pattern", "")),
        "rate": float(point.get("rate", 0.0)),
        "concurrency": point.get("concurrency"),
        "load": load_label(str(point.get("pattern", "")), float(point.get("rate", 0.0)), point.get("concurrency")),
        "repeat": int(point.get("repeat") or 0),  # which run of its configuration (a spec's `repeats`), from 0
        "options": server_options(point),
        "role": _role(point, [model, *(colocated or [])]) if colocated else "",
        "throughput": _num(result, "achieved_rate"),  # requests/s
        "samples_per_s": _samples(result, point),
        "p50_ms": _num(result, "latency_ms.p50"),
        "p99_ms": _num(result, "latency_ms.p99"),
        # Upper end of the p99's 95% CI (block bootstrap): what the recommender's `confident` mode holds to the SLO.
        "p99_ci_high_ms": _ci_high(result, "p99"),
        "service_p99_ms": _num(result, "service_ms.p99"),
        "requests": int(result.get("requests") or 0),
        "errors": int(result.get("errors") or 0),
        "valid": bool(result.get("valid")),
        "invalid_reasons": [str(r.get("text", "")) for r in result.get("reasons") or []]
        or [str(t) for t in result.get("invalid_reasons") or []],
        "slo_p99_ms": slo_p99_ms,
        "slo_met": result.get("slo_met"),
        # Resources are None where not measurable (no GPU): the row keeps None, shown as "—".
        "cost_usd_per_1m": _num(result, "resources.cost_per_1m_requests"),
        "cost_usd_per_1m_tokens": _num(result, "resources.cost_per_1m_output_tokens"),
        "energy_j_per_1k_tokens": _num(result, "resources.energy_per_1k_output_tokens_j"),
        "energy_wh_per_1m": _wh_per_1m(_num(result, "resources.energy_per_request_j")),
        "co2_g_per_1m": _num(result, "resources.co2_g_per_1m_requests"),
        "gpu_util": _num(result, "resources.gpu_util_percent_mean"),
        "started_at": str(started) if started is not None else None,
        # A language model's figures (None for tensor models): TTFT from the intended time, per-token time, the
        # server's output tokens/s and goodput (requests/s meeting the TTFT and TPOT SLOs).
        "ttft_p99_ms": _num(result, "llm.ttft_ms.p99"),
        "ttft_p99_ci_high_ms": _ttft_ci_high(result),
        "tpot_p99_ms": _num(result, "llm.tpot_ms.p99"),
        "itl_p99_ms": _num(result, "llm.itl_ms.p99"),
        "tokens_per_s": _num(result, "llm.output_tokens_per_s"),
        "goodput_rps": _num(result, "llm.goodput_rps"),
        "goodput_share": _num(result, "llm.goodput_share"),
        # The served model's top-1 accuracy against the job's labelled data (`quality:`), with its 95% interval and
        # sample count; None where the job asked for no quality check or it could not run.
        "accuracy": _num(result, "quality.accuracy.top1.value"),
        "accuracy_low": _num(result, "quality.accuracy.top1.low"),
        "accuracy_high": _num(result, "quality.accuracy.top1.high"),
        "accuracy_samples": _int(_num(result, "quality.accuracy.top1.samples")),
        # Whether the point met its job's quality floor (quality.min_accuracy; None without one): below it, never best.
        "quality_floor_met": (result.get("quality") or {}).get("floor_met"),
        # A search point: the load found is the row's rate (or users); the lowest failing load and how it stopped.
        "search_lowest_fail": _num(result, "search.lowest_fail"),
        "search_stopped": (result.get("search") or {}).get("stopped"),
        "search_probes": len((result.get("search") or {}).get("probes") or []) or None,
        # A canonical model's hyper-parameters (None for other models) so the heat map can group by them.
        "kind": canon.get("kind"),
        "depth": canon.get("depth"),
        "width": canon.get("width"),
        "input_size": canon.get("input_size"),
        "flops_per_inference": canon.get("flops"),
        "bytes_per_inference": canon.get("bytes"),
        # The reproducibility record (configuration hash and environment), for compare's "comparable?" verdict.
        "environment": env,
        # Measured by another tool and imported (common/wire/imports.py): its definitions, benchfleet's recomputation
        # from its records, where it fell behind; None for benchfleet's own points.
        "imported": result.get("imported"),
    }


async def set_model_tags(db: AsyncDatabase, *, model_ref: str, tags: list[str]) -> None:
    """The model's rows carry its new tags (tags are filtered on, never sorted by: no count changes)."""
    await db[COLLECTION].update_many({"model": model_ref}, {"$set": {"tags": tags}})
    await restamp(db)


async def job_rows(db: AsyncDatabase, *, job_id: str, team: str | None = None) -> list[dict[str, Any]]:
    """The rows of one job (of `team`, when given) by point index."""
    return await db[COLLECTION].find({"job_id": job_id, **team_query(team)}).sort("index", ASCENDING).to_list(None)


def _baseline_id(team: str, name: str) -> str:
    """Each team names its own baselines. The default team's keep their bare name (as pinned before teams); another
    team's are "team/name" ("/" is in no name, so the two never meet)."""
    return name if team == DEFAULT_TEAM else f"{team}/{name}"


async def baseline_owner(db: AsyncDatabase, *, team: str, name: str) -> str | None:
    """Who pinned the team's named baseline; None if none."""
    doc = await db[BASELINES].find_one({"_id": _baseline_id(team, name)}, {"owner": 1})
    return None if doc is None else str(doc["owner"])


async def set_baseline(db: AsyncDatabase, *, team: str, name: str, job_id: str, owner: str) -> None:
    """Pin a job as the team's named baseline, owned by whoever pinned it first."""
    update = {"$set": {"job_id": job_id}, "$setOnInsert": {"owner": owner, "team": team, "name": name}}
    await db[BASELINES].update_one({"_id": _baseline_id(team, name)}, update, upsert=True)


async def baselines_of(db: AsyncDatabase, *, job_id: str) -> list[str]:
    """The names of the baselines pinned to a job (any team's)."""
    return sorted([str(d.get("name") or d["_id"]) async for d in db[BASELINES].find({"job_id": job_id}, {"name": 1})])


async def get_baseline(db: AsyncDatabase, *, team: str, name: str) -> str | None:
    """The job pinned as the team's named baseline, if any."""
    doc = await db[BASELINES].find_one({"_id": _baseline_id(team, name)})
    return doc["job_id"] if doc else None


async def index_point(db: AsyncDatabase, *, job_id: str, attempt: int, result: dict[str, Any]) -> None:
    """Write the leaderboard row of a point just stored (the job supplies name, model and SLO)."""
    fields = {"name": 1, "model_ref": 1, "spec.slo": 1, "spec.colocate": 1, "team": 1, "shard": 1}
    job = await db["jobs"].find_one({"_id": job_id}, fields)
    if job is None or (job.get("shard") or {}).get("index", 0) > 0:
        return  # a shard's own share of a point is not a row: its coordinator's merged point is
    slo = ((job.get("spec") or {}).get("slo") or {}).get("p99_ms")
    model = await db["models"].find_one({"_id": job.get("model_ref", "")}, {"canonical": 1, "tags": 1})
    row = row_from_result(
        job_id=job_id,
        job_name=job.get("name", ""),
        model=job.get("model_ref", ""),
        slo_p99_ms=slo,
        attempt=attempt,
        team=job["team"],
        result=result,
        canonical=(model or {}).get("canonical"),
        tags=(model or {}).get("tags"),
        colocated=((job.get("spec") or {}).get("colocate") or {}).get("models") or [],
    )
    await write_row(db, row)


async def tallies(db: AsyncDatabase, *, job_ids: list[str]) -> dict[str, PointTally]:
    """Per job, its stored points counted: how many, how many valid, how many meet their SLO (a job list's verdicts,
    in one read)."""
    out: dict[str, PointTally] = {}
    fields = {"job_id": 1, "valid": 1, "slo_met": 1, "p99_ms": 1, "slo_p99_ms": 1}
    async for doc in db[COLLECTION].find({"job_id": {"$in": job_ids}}, fields):
        tally = out.setdefault(doc["job_id"], PointTally())
        tally.points += 1
        tally.valid += bool(doc.get("valid"))
        tally.slo_met += rowbest.meets_slo(doc)
    return out
