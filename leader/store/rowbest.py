"""Each team's best point under its SLO per model, kept as rows are written: what the leaderboard highlights, read for
a page's rows by id instead of found by scanning every row.

"Best under SLO": per model, the valid point serving the most samples/s that meets its job's SLO. A point run several
times (`repeats`) counts only if every run meets it, by the run that served least. `leaderboard_best` holds one
document per (team, model): the row's id and the run it belongs to. A new row can only raise the best; a rewrite of
the best's own run, or a deletion that takes it, finds the model's best again from its rows.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from pymongo.asynchronous.database import AsyncDatabase

from common.spec.job import load_label

BEST = "leaderboard_best"
# What deciding the best reads of a row.
FIELDS = {
    "job_id": 1,
    "team": 1,
    "model": 1,
    "backend": 1,
    "hardware": 1,
    "batch_size": 1,
    "load": 1,
    "pattern": 1,
    "rate": 1,
    "concurrency": 1,
    "options": 1,
    "role": 1,
    "valid": 1,
    "p99_ms": 1,
    "slo_p99_ms": 1,
    "slo_met": 1,
    "samples_per_s": 1,
    "throughput": 1,
}


def samples_per_s(row: dict[str, Any]) -> float | None:
    """Samples (inputs) the point served per second: the work it did, whatever its batch size (a batch-8 point at
    150 req/s serves more than a batch-1 point at 900)."""
    stored = row.get("samples_per_s")
    return None if stored is None else float(stored)


def run_key(row: dict[str, Any]) -> tuple[Any, ...]:
    """The runs of one point of one job: the same configuration (server options and co-location role included) at
    the same load (they differ in `repeat` only)."""
    load = row.get("load") or load_label(str(row.get("pattern", "")), float(row.get("rate") or 0.0), row.get("concurrency"))
    config = (row.get("options") or "", row.get("role") or "")
    return (row.get("job_id"), row["model"], row["backend"], row["hardware"], row["batch_size"], load, *config)


def meets_slo(row: dict[str, Any], p99_ms: float | None = None) -> bool:
    """A valid point under the given p99 (or, without one, under its own job's SLO)."""
    if not row.get("valid") or row.get("p99_ms") is None:
        return False
    limit = p99_ms if p99_ms is not None else row.get("slo_p99_ms")
    if limit is None:
        return row.get("slo_met") is True
    return row["p99_ms"] <= limit


def _score(row: dict[str, Any]) -> tuple[float, float]:
    return (samples_per_s(row) or 0.0, -(row.get("p99_ms") or 0))


def _candidate(siblings: list[dict[str, Any]]) -> dict[str, Any] | None:
    """A run's row that stands for it (the one that served least), if every run of it meets its SLO."""
    # A run below its job's quality floor is never best, however fast (its answers are not good enough).
    good = all(r.get("quality_floor_met") is not False for r in siblings)
    if not siblings or not good or not all(meets_slo(r) and samples_per_s(r) is not None for r in siblings):
        return None
    return min(siblings, key=_score)


def best_rows(rows: Iterable[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    """Per (team, model), the best row under SLO among `rows`."""
    runs: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for row in rows:
        runs.setdefault((row["team"], *run_key(row)), []).append(row)
    best: dict[tuple[str, str], dict[str, Any]] = {}
    for siblings in runs.values():
        candidate = _candidate(siblings)
        if candidate is None:
            continue
        current = best.get((candidate["team"], candidate["model"]))
        if current is None or _score(candidate) > _score(current):
            best[(candidate["team"], candidate["model"])] = candidate
    return best


def _id(team: str, model: str) -> str:
    return f"{team}\x1f{model}"


def _doc(row: dict[str, Any]) -> dict[str, Any]:
    return {
        "_id": _id(row["team"], row["model"]),
        "team": row["team"],
        "model": row["model"],
        "row_id": row["_id"],
        "run": json.dumps(run_key(row), default=str),
        "score": list(_score(row)),
    }


async def _settle(db: AsyncDatabase, rows_collection: str, team: str, model: str) -> None:
    """Find a model's best again from all its rows (its best run was rewritten or deleted)."""
    rows = db[rows_collection].find({"team": team, "model": model}, FIELDS).batch_size(2000)
    best = best_rows([r async for r in rows if r.get("valid")])
    row = best.get((team, model))
    if row is None:
        await db[BEST].delete_one({"_id": _id(team, model)})
    else:
        await db[BEST].replace_one({"_id": _id(team, model)}, _doc(row), upsert=True)


async def written(db: AsyncDatabase, rows_collection: str, row: dict[str, Any]) -> None:
    """A row was written: its run may now be its model's best (or, if its run was the best, the best may move)."""
    team, model = row["team"], row["model"]
    current = await db[BEST].find_one({"_id": _id(team, model)})
    if current is not None and current["run"] == json.dumps(run_key(row), default=str):
        await _settle(db, rows_collection, team, model)
        return
    if not meets_slo(row) or samples_per_s(row) is None or (current is not None and list(_score(row)) <= current["score"]):
        return  # its run stands for no more than this row: it cannot pass the best (no need to read the job's rows)
    siblings = [r async for r in db[rows_collection].find({"job_id": row["job_id"]}, FIELDS) if run_key(r) == run_key(row)]
    candidate = _candidate(siblings)
    if candidate is not None and (current is None or list(_score(candidate)) > current["score"]):
        await db[BEST].replace_one({"_id": _id(team, model)}, _doc(candidate), upsert=True)


async def deleted(db: AsyncDatabase, rows_collection: str, row_ids: list[str]) -> None:
    """Rows were deleted: a model whose best was among them finds its best again."""
    async for doc in db[BEST].find({"row_id": {"$in": row_ids}}, {"team": 1, "model": 1}):
        await _settle(db, rows_collection, doc["team"], doc["model"])


async def rebuild(db: AsyncDatabase, rows_collection: str) -> None:
    """Every team's and model's best found again from every row."""
    rows = [r async for r in db[rows_collection].find({"valid": True}, FIELDS).batch_size(2000)]
    await db[BEST].delete_many({})
    docs = [_doc(row) for row in best_rows(rows).values()]
    if docs:
        await db[BEST].insert_many(docs, ordered=False)


async def best_ids(db: AsyncDatabase, keys: Iterable[tuple[str, str]]) -> set[str]:
    """The ids of the best rows of these (team, model)s."""
    ids = sorted({_id(team, model) for team, model in keys})
    if not ids:
        return set()
    return {doc["row_id"] async for doc in db[BEST].find({"_id": {"$in": ids}}, {"row_id": 1})}
