"""The leaderboard: sort and filter every stored point server-side.

PerfDB's embedded server (SecantusDB) sorts 100k documents in seconds even with an index (it does not
use indexes for sorts), so the leader keeps the rows in memory and catches up by an indexed
`updated_ns` range query before each answer; the first answer loads everything once.
"""

from __future__ import annotations

import asyncio
import heapq
import math
import re
import time
from collections.abc import Callable, Iterable
from typing import Any

from motor.motor_asyncio import AsyncIOMotorDatabase

from common.analysis import LeaderboardPage, LeaderboardRow
from common.errors import InvalidRequest
from leader.store import leaderboard as store

NUMERIC = (
    "batch_size",
    "rate",
    "throughput",
    "p50_ms",
    "p99_ms",
    "service_p99_ms",
    "requests",
    "errors",
    "cost_usd_per_1m",
    "energy_wh_per_1m",
    "co2_g_per_1m",
    "gpu_util",
    "index",
    "attempt",
    "slo_p99_ms",
)
TEXT = ("model", "backend", "hardware", "follower_id", "job_id", "job_name", "pattern", "started_at")
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


def parse_filter(text: str) -> Callable[[dict[str, Any]], bool]:
    """`backend:triton`, `p99<20`, `batch>=8`, `valid:true`, `model!=x` → a row predicate."""
    match = _FILTER_RE.match(text)
    if not match:
        raise InvalidRequest(f"filter must be column:value or column<number, got {text!r}", field="filter")
    name, op, raw = match.groups()
    col = column(name, "filter")
    if col in NUMERIC:
        try:
            number = float(raw)
        except ValueError:
            raise InvalidRequest(f"filter on {col} needs a number, got {raw!r}", field="filter") from None
        compare: dict[str, Callable[[float, float], bool]] = {
            ":": lambda a, b: a == b,
            "=": lambda a, b: a == b,
            "!=": lambda a, b: a != b,
            "<": lambda a, b: a < b,
            "<=": lambda a, b: a <= b,
            ">": lambda a, b: a > b,
            ">=": lambda a, b: a >= b,
        }
        fn = compare[op]
        return lambda row: row.get(col) is not None and fn(row[col], number)
    if op not in {":", "=", "!="}:
        raise InvalidRequest(f"filter on {col} takes : or !=, not {op}", field="filter")
    if col in BOOL:
        want = _as_bool(raw)
        return (lambda row: row.get(col) is want) if op != "!=" else (lambda row: row.get(col) is not want)
    if op == "!=":
        return lambda row: str(row.get(col)) != raw
    return lambda row: str(row.get(col)) == raw


def _sort_key(col: str, descending: bool) -> Callable[[dict[str, Any]], tuple[Any, ...]]:
    # Absent values sort last in either direction; ties broken by id so pages are stable.
    if col in NUMERIC:

        def key(row: dict[str, Any]) -> tuple[Any, ...]:
            value = row.get(col)
            if value is None or (isinstance(value, float) and math.isnan(value)):
                return (1, 0.0, row["_id"])
            return (0, -value if descending else value, row["_id"])

        return key

    def text_key(row: dict[str, Any]) -> tuple[Any, ...]:
        value = row.get(col)
        return (1, "", row["_id"]) if value is None else (0, str(value), row["_id"])

    return text_key


def best_ids(rows: Iterable[dict[str, Any]]) -> set[str]:
    """Per model, the valid point with the highest throughput that meets its SLO ("best under SLO")."""
    best: dict[str, dict[str, Any]] = {}
    for row in rows:
        if not meets_slo(row) or row.get("throughput") is None:
            continue
        current = best.get(row["model"])
        if current is None or (row["throughput"], -(row.get("p99_ms") or 0)) > (
            current["throughput"],
            -(current.get("p99_ms") or 0),
        ):
            best[row["model"]] = row
    return {row["_id"] for row in best.values()}


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
    fields = {k: v for k, v in doc.items() if k not in {"_id", "updated_ns"}}
    return LeaderboardRow(id=doc["_id"], best=best, **fields)


class LeaderboardIndex:
    """Every leaderboard row in memory, caught up from PerfDB before each query."""

    def __init__(self) -> None:
        self.rows: dict[str, dict[str, Any]] = {}
        self._synced_ns = 0
        self._lock = asyncio.Lock()
        self._best: set[str] | None = None

    async def sync(self, db: AsyncIOMotorDatabase) -> None:
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
        old = self.rows.get(doc["_id"])
        if old is None or old.get("updated_ns", 0) <= doc.get("updated_ns", 0):
            self.rows[doc["_id"]] = doc
            self._best = None

    def best(self) -> set[str]:
        """Ids of the best-under-SLO rows (cached until a row changes)."""
        if self._best is None:
            self._best = best_ids(self.rows.values())
        return self._best

    def select(self, filters: list[str]) -> list[dict[str, Any]]:
        """Rows matching every filter."""
        predicates = [parse_filter(text) for text in filters]
        if not predicates:
            return list(self.rows.values())
        return [row for row in self.rows.values() if all(p(row) for p in predicates)]

    def query(self, *, sort: str, order: str, filters: list[str], limit: int, offset: int) -> LeaderboardPage:
        """One sorted, filtered page and the total count."""
        col = column(sort, "sort")
        if order not in {"asc", "desc"}:
            raise InvalidRequest("order must be asc or desc", field="order")
        if not 1 <= limit <= MAX_LIMIT:
            raise InvalidRequest(f"limit must be in [1, {MAX_LIMIT}]", field="limit")
        if offset < 0:
            raise InvalidRequest("offset must be >= 0", field="offset")
        matching = self.select(filters)
        key = _sort_key(col, order == "desc")
        # A partial selection (heap) instead of a full sort: O(n log k) for the pages people look at.
        page = heapq.nsmallest(offset + limit, matching, key=key)[offset:]
        best = self.best()
        return LeaderboardPage(
            rows=[to_row(doc, doc["_id"] in best) for doc in page],
            total=len(matching),
            sort=col,
            order="desc" if order == "desc" else "asc",
            filters=filters,
            limit=limit,
            offset=offset,
        )
