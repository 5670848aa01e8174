"""The leaderboard: sort and filter every stored point server-side.

PerfDB's embedded server (SecantusDB) sorts 100k documents in seconds even with an index (it does not
use indexes for sorts), so the leader keeps the rows in memory and catches up by an indexed
`updated_ns` range query before each answer; the first answer loads everything once. Queries run on numpy
columns (rebuilt on the first query after a change), not per-row Python: filtering and top-k of 100k rows
take milliseconds that way.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Iterable
from typing import Any

import numpy as np
from pymongo.asynchronous.database import AsyncDatabase

from common.errors import InvalidRequest
from common.spec.job import load_label
from common.wire.analysis import LeaderboardPage, LeaderboardRow
from leader.store import leaderboard as store

NUMERIC = (
    "batch_size",
    "rate",
    "throughput",
    "samples_per_s",
    "p50_ms",
    "p99_ms",
    "p99_ci_high_ms",
    "service_p99_ms",
    "requests",
    "errors",
    "cost_usd_per_1m",
    "energy_wh_per_1m",
    "co2_g_per_1m",
    "gpu_util",
    "index",
    "attempt",
    "repeat",
    "slo_p99_ms",
    "depth",
    "width",
    "input_size",
    "flops_per_inference",
    "bytes_per_inference",
    "ttft_p99_ms",
    "ttft_p99_ci_high_ms",
    "tpot_p99_ms",
    "itl_p99_ms",
    "tokens_per_s",
    "goodput_rps",
    "goodput_share",
    "cost_usd_per_1m_tokens",
    "energy_j_per_1k_tokens",
    "search_lowest_fail",
    "search_probes",
)
TEXT = (
    "model",
    "backend",
    "hardware",
    "follower_id",
    "job_id",
    "job_name",
    "pattern",
    "started_at",
    "kind",
    "team",
    "search_stopped",
    "options",
    "role",
    "tags",  # the model's tags: `filter=tags:vision` keeps the rows of models tagged vision
)
BOOL = ("valid", "slo_met")
COLUMNS = NUMERIC + TEXT + BOOL
# Short names people type (`sort=p99`).
ALIASES = {
    "p99": "p99_ms",
    "p50": "p50_ms",
    "batch": "batch_size",
    "cost": "cost_usd_per_1m",
    "energy": "energy_wh_per_1m",
    "co2": "co2_g_per_1m",
    "job": "job_id",
    "follower": "follower_id",
    "throughput_rps": "throughput",
    "ttft": "ttft_p99_ms",
    "tpot": "tpot_p99_ms",
    "itl": "itl_p99_ms",
    "tokens": "tokens_per_s",
    "goodput": "goodput_rps",
    "attainment": "goodput_share",
    "cost_tokens": "cost_usd_per_1m_tokens",
}
MAX_LIMIT = 1000
# A row is stamped before its write commits; re-read a margin of recent stamps (idempotent by _id).
SYNC_MARGIN_NS = 5_000_000_000
_FILTER_RE = re.compile(r"^\s*([A-Za-z0-9_]+)\s*(<=|>=|!=|:|=|<|>)\s*(.*?)\s*$")


def column(name: str, field: str) -> str:
    """A known column name (aliases resolved), or InvalidRequest naming the field."""
    resolved = ALIASES.get(name, name)
    if resolved not in COLUMNS:
        raise InvalidRequest(f"unknown column {name!r}; known: {', '.join(COLUMNS)}", field=field)
    return resolved


def _as_bool(text: str) -> bool:
    lowered = text.lower()
    if lowered in {"true", "yes", "1"}:
        return True
    if lowered in {"false", "no", "0"}:
        return False
    raise InvalidRequest(f"expected true or false, got {text!r}", field="filter")


def parse_filter(text: str) -> tuple[str, str, Any]:
    """`backend:triton`, `p99<20`, `batch>=8`, `valid:true`, `model!=x` → (column, operator, value)."""
    match = _FILTER_RE.match(text)
    if not match:
        raise InvalidRequest(f"filter must be column:value or column<number, got {text!r}", field="filter")
    name, op, raw = match.groups()
    col = column(name, "filter")
    op = "=" if op == ":" else op
    if col in NUMERIC:
        try:
            return col, op, float(raw)
        except ValueError:
            raise InvalidRequest(f"filter on {col} needs a number, got {raw!r}", field="filter") from None
    if op not in {"=", "!="}:
        raise InvalidRequest(f"filter on {col} takes : or !=, not {op}", field="filter")
    return col, op, (_as_bool(raw) if col in BOOL else raw)


def _scoped(parsed: list[tuple[str, str, Any]], team: str | None) -> list[tuple[str, str, Any]]:
    """The filters, and the caller's team (its scope: None for every team) as one more."""
    return parsed if team is None else [*parsed, ("team", "=", team)]


_MISSING = "\uffff"  # sorts after any real text


def _text(value: Any) -> str:
    """A text column's value: a list (tags) as its items joined by commas."""
    return ",".join(str(v) for v in value) if isinstance(value, list) else str(value)


class _Columns:
    """The rows as numpy columns: numbers (NaN for absent), booleans as 1/0/NaN, text as sort-ordered codes."""

    def __init__(self, docs: list[dict[str, Any]]) -> None:
        self.docs = sorted(docs, key=lambda d: d["_id"])  # position order = id order: the tie-break of every sort
        self.num: dict[str, np.ndarray] = {}
        self.codes: dict[str, np.ndarray] = {}
        self.lookup: dict[str, dict[str, int]] = {}
        n = len(self.docs)
        nan = float("nan")
        for col in NUMERIC + BOOL:
            self.num[col] = np.fromiter((nan if (v := d.get(col)) is None else v for d in self.docs), dtype=np.float64, count=n)
        for col in TEXT:
            values = [_MISSING if (v := d.get(col)) is None else _text(v) for d in self.docs]
            # Codes in sorted order of the distinct values, so comparing codes sorts the text.
            lookup = {value: i for i, value in enumerate(sorted(set(values)))}
            self.codes[col] = np.fromiter((lookup[v] for v in values), dtype=np.int64, count=n)
            self.lookup[col] = lookup

    def mask(self, filters: list[tuple[str, str, Any]]) -> np.ndarray:
        out = np.ones(len(self.docs), dtype=bool)
        for col, op, value in filters:
            if col in self.num:
                arr = self.num[col]
                target = float(value)
                present = ~np.isnan(arr)
                ops = {
                    "=": arr == target,
                    "!=": (arr != target) & present,
                    "<": arr < target,
                    "<=": arr <= target,
                    ">": arr > target,
                    ">=": arr >= target,
                }
                out &= ops[op] & present
            elif col == "tags":  # one of the row's tags
                held = [code for text, code in self.lookup[col].items() if value in text.split(",")]
                found = np.isin(self.codes[col], held)
                out &= found if op == "=" else ~found
            else:
                code = self.lookup[col].get(value, -1)
                out &= (self.codes[col] == code) if op == "=" else (self.codes[col] != code)
        return out

    def key(self, col: str, descending: bool) -> np.ndarray:
        """A float key where smaller comes first and absent values come last in either direction."""
        if col in self.num:
            arr = -self.num[col] if descending else self.num[col].copy()
        else:
            codes = self.codes[col].astype(np.float64)
            missing = self.lookup[col].get(_MISSING)
            arr = -codes if descending else codes
            if missing is not None:
                arr[self.codes[col] == missing] = np.nan
        arr[np.isnan(arr)] = np.inf
        return arr

    def top(self, mask: np.ndarray, col: str, descending: bool, count: int) -> list[int]:
        """Positions of the first `count` matching rows in sort order (ties by id)."""
        candidates = np.flatnonzero(mask)
        if count <= 0 or candidates.size == 0:
            return []
        keys = self.key(col, descending)[candidates]
        if count < candidates.size:
            # Everything up to the count-th smallest key, boundary ties included, then an exact sort of those.
            kth = np.partition(keys, count - 1)[count - 1]
            keep = keys <= kth
            candidates, keys = candidates[keep], keys[keep]
        order = np.lexsort((candidates, keys))
        return candidates[order][:count].tolist()


def samples_per_s(row: dict[str, Any]) -> float | None:
    """Samples (inputs) the point served per second: the work it did, whatever its batch size (a batch-8 point at
    150 req/s serves more than a batch-1 point at 900). Rows stored before the column get it from their parts."""
    stored = row.get("samples_per_s")
    if stored is not None:
        return float(stored)
    throughput = row.get("throughput")
    return None if throughput is None else float(throughput) * int(row.get("batch_size") or 1)


def run_key(row: dict[str, Any]) -> tuple[Any, ...]:
    """The runs of one point of one job: the same configuration (server options and co-location role included) at
    the same load (they differ in `repeat` only)."""
    load = row.get("load") or load_label(str(row.get("pattern", "")), float(row.get("rate") or 0.0), row.get("concurrency"))
    config = (row.get("options") or "", row.get("role") or "")
    return (row.get("job_id"), row["model"], row["backend"], row["hardware"], row["batch_size"], load, *config)


def best_ids(rows: Iterable[dict[str, Any]]) -> set[str]:
    """Per model, the valid point serving the most samples/s that meets its SLO ("best under SLO"). A point run
    several times (`repeats`) counts only if every run meets it, by the run that served least."""
    runs: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for row in rows:
        runs.setdefault(run_key(row), []).append(row)
    best: dict[str, tuple[tuple[float, float], dict[str, Any]]] = {}
    for siblings in runs.values():
        if not all(meets_slo(row) and samples_per_s(row) is not None for row in siblings):
            continue
        row = min(siblings, key=lambda r: (samples_per_s(r) or 0.0, -(r.get("p99_ms") or 0)))
        key = (samples_per_s(row) or 0.0, -(row.get("p99_ms") or 0))
        current = best.get(row["model"])
        if current is None or key > current[0]:
            best[row["model"]] = (key, row)
    return {row["_id"] for _, row in best.values()}


def meets_slo(row: dict[str, Any], p99_ms: float | None = None) -> bool:
    """A valid point under the given p99 (or, without one, under its own job's SLO)."""
    if not row.get("valid") or row.get("p99_ms") is None:
        return False
    limit = p99_ms if p99_ms is not None else row.get("slo_p99_ms")
    if limit is None:
        return row.get("slo_met") is True
    return row["p99_ms"] <= limit


def to_row(doc: dict[str, Any], best: bool = False) -> LeaderboardRow:
    """A stored row document as the API's row."""
    fields = {k: v for k, v in doc.items() if k not in {"_id", "updated_ns", "environment"}}
    return LeaderboardRow(id=doc["_id"], best=best, **fields)


class LeaderboardIndex:
    """Every leaderboard row in memory, caught up from PerfDB before each query."""

    def __init__(self) -> None:
        self.rows: dict[str, dict[str, Any]] = {}
        self._synced_ns = 0
        self._lock = asyncio.Lock()
        self._best: set[str] | None = None
        self._columns: _Columns | None = None

    async def sync(self, db: AsyncDatabase) -> None:
        """Read rows written since shortly before the last sync began (all of them the first time)."""
        async with self._lock:
            started_ns = time.time_ns()
            since = max(1, self._synced_ns - SYNC_MARGIN_NS) if self._synced_ns else 0
            docs = await store.rows_since(db, updated_ns=since)
            for doc in docs:
                self.add(doc)
            # The writer's clock stamped each row before its write: anything stamped before this sync began,
            # minus the margin, is visible now; later syncs re-read only that recent margin.
            self._synced_ns = started_ns

    def add(self, doc: dict[str, Any]) -> None:
        """Insert or replace one row (a route that just stored it calls this too)."""
        doc["samples_per_s"] = samples_per_s(doc)
        old = self.rows.get(doc["_id"])
        if old is None or old.get("updated_ns", 0) <= doc.get("updated_ns", 0):
            self.rows[doc["_id"]] = doc
            self._best = None
            self._columns = None

    def discard(self, job_ids: list[str]) -> None:
        """Forget the rows of deleted jobs (their documents are gone: no sync would say so)."""
        gone = set(job_ids)
        for row_id in [k for k, row in self.rows.items() if row.get("job_id") in gone]:
            del self.rows[row_id]
            self._best = None
            self._columns = None

    def best(self) -> set[str]:
        """Ids of the best-under-SLO rows (cached until a row changes)."""
        if self._best is None:
            self._best = best_ids(self.rows.values())
        return self._best

    def columns(self) -> _Columns:
        """The numpy columns (rebuilt after a change)."""
        if self._columns is None:
            self._columns = _Columns(list(self.rows.values()))
        return self._columns

    def select(self, filters: list[str], team: str | None = None) -> list[dict[str, Any]]:
        """Rows matching every filter (of `team`, when given)."""
        parsed = _scoped([parse_filter(text) for text in filters], team)
        if not parsed:
            return list(self.rows.values())
        cols = self.columns()
        return [cols.docs[i] for i in np.flatnonzero(cols.mask(parsed))]

    def query(
        self, *, sort: str, order: str, filters: list[str], limit: int, offset: int, team: str | None = None
    ) -> LeaderboardPage:
        """One sorted, filtered page (of `team`'s rows, when given) and the total count."""
        col = column(sort, "sort")
        if order not in {"asc", "desc"}:
            raise InvalidRequest("order must be asc or desc", field="order")
        if not 1 <= limit <= MAX_LIMIT:
            raise InvalidRequest(f"limit must be in [1, {MAX_LIMIT}]", field="limit")
        if offset < 0:
            raise InvalidRequest("offset must be >= 0", field="offset")
        parsed = _scoped([parse_filter(text) for text in filters], team)
        cols = self.columns()
        mask = cols.mask(parsed)
        page = [cols.docs[i] for i in cols.top(mask, col, order == "desc", offset + limit)[offset:]]
        best = self.best()
        return LeaderboardPage(
            rows=[to_row(doc, doc["_id"] in best) for doc in page],
            total=int(mask.sum()),
            sort=col,
            order="desc" if order == "desc" else "asc",
            filters=filters,
            limit=limit,
            offset=offset,
        )
