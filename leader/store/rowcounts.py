"""How many leaderboard rows lie in each sort bucket: what lets a page of a 100,000-row leaderboard be read from PerfDB
without reading the rows sorted before it (PerfDB's embedded server decodes every candidate of a sorted query before
its limit, and counts by decoding too: seconds at that size).

Each sortable column splits its values into buckets in sort order: a number by its magnitude (STEPS buckets per
doubling), a text by its first PREFIX characters, a flag by itself, an absent value into a bucket of its own (last in
either direction). `leaderboard_counts` holds, per team, column and bucket, how many rows it has and the least and
greatest value seen in it (a bucket whose least and greatest are equal holds one value). A big bucket is read by its
parts, counted in `leaderboard_ties`: a number bucket by finer value (FINE parts, in value order), and every bucket
by the first TIE_CHARS characters of the row id, which orders rows tied on one value (they sort by id; hex job ids
spread evenly). Reading a page then means: the counts of the sort column (tens of documents), and the rows of the
one or two buckets or parts the page falls in, each an index range.

A row's counts change with the row (leader.store.leaderboard.write_row); `rebuild` recounts everything, for the
migration that introduced the counts and after a leader stopped between writing a row and counting it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from pymongo import ASCENDING, UpdateOne
from pymongo.asynchronous.database import AsyncDatabase

COUNTS = "leaderboard_counts"
TIES = "leaderboard_ties"
TEXT = ("model", "backend", "hardware")
FLAGS = ("valid",)
NUMBERS = (
    "batch_size",
    "rate",
    "p50_ms",
    "p99_ms",
    "throughput",
    "samples_per_s",
    "cost_usd_per_1m",
    "energy_wh_per_1m",
    "gpu_util",
    "ttft_p99_ms",
    "tpot_p99_ms",
    "itl_p99_ms",
    "tokens_per_s",
    "goodput_rps",
    "goodput_share",
    "cost_usd_per_1m_tokens",
    "energy_j_per_1k_tokens",
)
# The columns a whole leaderboard can be sorted by (any column sorts a narrow selection: a job's rows, one model's).
SORTABLE = TEXT + FLAGS + NUMBERS
STEPS = 4  # numeric buckets per doubling: each spans 19% of its values
PREFIX = 64  # a text bucket: the value's first characters (shorter values are a bucket each)
TIE_CHARS = 2  # a tied bucket's parts: the row id's first characters
FINE = 64  # a number bucket's finer parts by value
_POSITIVE = 1_000_000  # numeric bucket keys: negative values below 0, zero at 0, positive values above
_CLIP = 4000  # magnitudes beyond 2**±1000 share the outermost buckets
_WIDEN = 1e-9  # a bucket's value range read a hair wider, then trimmed by bucket() itself (float rounding at edges)
_TOP = "\U0010ffff"

Key = int | str | bool | None


def bucket(col: str, value: Any) -> Key:
    """The bucket of a column's value (None: the value is absent)."""
    if value is None:
        return None
    if col in FLAGS:
        return bool(value)
    if col in TEXT:
        return str(value)[:PREFIX]
    number = float(value)
    if math.isnan(number):
        return None
    if number == 0:
        return 0
    step = _CLIP if math.isinf(number) else max(-_CLIP, min(_CLIP, math.floor(math.log2(abs(number)) * STEPS)))
    return _POSITIVE + step if number > 0 else -(_POSITIVE + step)


def ordered(buckets: list[Bucket], descending: bool) -> list[Bucket]:
    """Buckets in sort order: by key (reversed for descending), the absent bucket last either way."""
    present = sorted((b for b in buckets if b.key is not None), key=lambda b: b.key, reverse=descending)  # type: ignore[arg-type,return-value]
    return present + [b for b in buckets if b.key is None]


def exact(col: str, key: Key) -> bool:
    """Whether a bucket holds exactly one value by its key (a flag, a short text, the absent value)."""
    return key is None or col in FLAGS or (col in TEXT and len(str(key)) < PREFIX)


def _edges(key: int) -> tuple[float | None, float | None]:
    """The least and greatest value a number bucket may hold, a hair wider (None: unbounded)."""
    if key == 0:
        return 0.0, 0.0
    step = abs(key) - _POSITIVE
    low = 0.0 if step <= -_CLIP else 2.0 ** (step / STEPS) * (1 - _WIDEN)
    high = None if step >= _CLIP else 2.0 ** ((step + 1) / STEPS) * (1 + _WIDEN)
    return (low, high) if key > 0 else (None if high is None else -high, -low)


def query(col: str, key: Key) -> dict[str, Any]:
    """A PerfDB condition on `col` that holds every row of the bucket (and perhaps a neighbour's at a float edge: trim
    with bucket())."""
    return span(col, [key])


def span(col: str, keys: list[Key]) -> dict[str, Any]:
    """A PerfDB condition on `col` that holds every row of the buckets `keys` (one, or several present ones of a
    number or text column) and of any bucket between them (trim with bucket())."""
    if len(keys) == 1 and (keys[0] is None or col in FLAGS or (col in TEXT and exact(col, keys[0]))):
        return {col: keys[0]}
    assert None not in keys and col not in FLAGS, (col, keys)
    if col in TEXT:
        return {col: {"$gte": min(map(str, keys)), "$lt": f"{max(map(str, keys))}{_TOP}"}}
    if keys == [0]:
        return {col: 0}
    numbers = [k for k in keys if isinstance(k, int)]
    assert len(numbers) == len(keys), (col, keys)
    edges = [_edges(k) for k in numbers]
    lows, highs = [e[0] for e in edges], [e[1] for e in edges]
    bounds = {
        **({"$gte": min(x for x in lows if x is not None)} if None not in lows else {}),
        **({"$lte": max(x for x in highs if x is not None)} if None not in highs else {}),
    }
    return {col: bounds or {"$ne": None}}


def tie_query(col: str, value: Any, first: str, last: str) -> dict[str, Any]:
    """The rows tied on `value` whose ids start with one of the parts `first`..`last`."""
    return {col: value, "_id": {"$gte": first, "$lt": f"{last}{_TOP}"}}


@dataclass
class Bucket:
    """One bucket of a column over the teams read: its rows, least and greatest value, and rows per team."""

    key: Key
    n: int = 0
    low: Any = None
    high: Any = None
    teams: dict[str, int] = field(default_factory=dict)

    def single(self, col: str) -> bool:
        """Every row holds one value (so rows sort by id alone)."""
        return exact(col, self.key) or (self.low is not None and self.low == self.high)

    def value(self, col: str) -> Any:
        """The one value of a single-valued bucket (its key where that is the value, else its least value seen)."""
        return self.key if exact(col, self.key) else self.low


def _id(team: str, col: str, key: Key) -> str:
    return f"{team}\x1f{col}\x1f{type(key).__name__}:{key}"


def fine(col: str, value: Any) -> int | None:
    """A number's finer part of its bucket (FINE parts per bucket, in value order within it); None for a bucket that
    is not split by value (zero, absent, the outermost, not a number column)."""
    key = bucket(col, value) if col in NUMBERS else None
    if not isinstance(key, int) or key == 0 or abs(abs(key) - _POSITIVE) >= _CLIP:
        return None
    step = math.floor(math.log2(abs(float(value))) * STEPS * FINE)
    return step if key > 0 else -step


def fine_query(col: str, key: int, first: int, last: int) -> dict[str, Any]:
    """A PerfDB condition holding the numbers of bucket `key`'s finer parts first..last (trim with fine())."""
    scale = STEPS * FINE
    if key > 0:  # parts are steps of the magnitude
        return {col: {"$gte": 2.0 ** (first / scale) * (1 - _WIDEN), "$lt": 2.0 ** ((last + 1) / scale) * (1 + _WIDEN)}}
    # Below zero parts are the magnitude's steps negated: the magnitudes run from step -last up to step -first.
    return {col: {"$gt": -(2.0 ** ((1 - first) / scale)) * (1 + _WIDEN), "$lte": -(2.0 ** (-last / scale)) * (1 - _WIDEN)}}


@dataclass(frozen=True)
class _Change:
    """One row's share of one count: its bucket (and its tied part, `part`), +1 or -1, and its value."""

    collection: str
    id: str
    fields: dict[str, Any]  # the count's own fields (team, column, key; a part's first characters)
    delta: int
    value: Any  # what low/high take in (None: nothing)


def _changes(row: dict[str, Any], delta: int) -> Iterable[_Change]:
    team = str(row["team"])
    part = str(row["_id"])[:TIE_CHARS]
    for col in SORTABLE:
        value: Any = row.get(col)
        key = bucket(col, value)
        stored: Any = None
        if delta > 0 and key is not None:
            stored = bool(value) if col in FLAGS else (str(value) if col in TEXT else float(value))
        fields = {"team": team, "col": col, "key": key}
        yield _Change(COUNTS, _id(team, col, key), fields, delta, stored)
        yield _Change(TIES, f"{_id(team, col, key)}\x1fi{part}", {**fields, "kind": "id", "part": part}, delta, None)
        step = fine(col, value)
        if step is not None:
            yield _Change(TIES, f"{_id(team, col, key)}\x1ff{step}", {**fields, "kind": "fine", "part": step}, delta, None)


def _update(change: _Change) -> UpdateOne:
    update: dict[str, Any] = {"$inc": {"n": change.delta}, "$setOnInsert": change.fields}
    if change.value is not None:
        update |= {"$min": {"low": change.value}, "$max": {"high": change.value}}
    return UpdateOne({"_id": change.id}, update, upsert=True)


def _same(old: dict[str, Any], new: dict[str, Any]) -> bool:
    return old["team"] == new["team"] and all(old.get(c) == new.get(c) for c in SORTABLE)


async def count(db: AsyncDatabase, *, old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
    """Move a row's counts from its old values (None: a new row) to its new ones (None: deleted)."""
    await count_many(db, old=[] if old is None else [old], new=[] if new is None else [new])


async def count_many(db: AsyncDatabase, *, old: list[dict[str, Any]], new: list[dict[str, Any]]) -> None:
    """Move rows' counts: take out the `old` rows', put in the `new` rows' (rows unchanged in every sorted column are
    left alone)."""
    if len(old) == 1 and len(new) == 1 and _same(old[0], new[0]):
        return
    changes = [*(c for row in old for c in _changes(row, -1)), *(c for row in new for c in _changes(row, 1))]
    for name in (COUNTS, TIES):
        ops = [_update(c) for c in changes if c.collection == name]
        for start in range(0, len(ops), 1000):
            await db[name].bulk_write(ops[start : start + 1000], ordered=False)


async def buckets(db: AsyncDatabase, col: str, teams: list[str] | None) -> list[Bucket]:
    """The column's non-empty buckets over `teams` (None: every team), ascending, the absent last."""
    merged: dict[Any, Bucket] = {}
    async for doc in db[COUNTS].find({"col": col}, {"team": 1, "key": 1, "n": 1, "low": 1, "high": 1}):
        if (teams is not None and doc["team"] not in teams) or doc.get("n", 0) <= 0:
            continue
        key = doc["key"]
        b = merged.setdefault((type(key).__name__, key), Bucket(key=key))
        b.n += int(doc["n"])
        b.teams[doc["team"]] = int(doc["n"])
        for name, pick in (("low", min), ("high", max)):
            if doc.get(name) is not None:
                current = getattr(b, name)
                setattr(b, name, doc[name] if current is None else pick(current, doc[name]))
    return ordered(list(merged.values()), descending=False)


async def parts(db: AsyncDatabase, col: str, key: Key, teams: list[str] | None, kind: str) -> list[tuple[Any, dict[str, int]]]:
    """A bucket's parts of one kind in ascending order, each (the part, rows per team): "id", its rows by the first
    characters of their ids (a tied bucket's order); "fine", a number bucket's rows by finer value."""
    found: dict[Any, dict[str, int]] = {}
    async for doc in db[TIES].find({"col": col, "key": key, "kind": kind}, {"team": 1, "part": 1, "n": 1}):
        if (teams is None or doc["team"] in teams) and doc.get("n", 0) > 0:
            found.setdefault(doc["part"], {})[doc["team"]] = int(doc["n"])
    return sorted(found.items())


async def rebuild(db: AsyncDatabase, collection: str) -> int:
    """Recount every row of `collection` from scratch; returns how many were counted."""
    docs: dict[str, dict[str, Any]] = {}
    counted = 0
    fields = {"team": 1, **{c: 1 for c in SORTABLE}}
    async for row in db[collection].find({}, fields).batch_size(2000):
        counted += 1
        for change in _changes(row, 1):
            doc = docs.setdefault(change.id, {"_id": change.id, "n": 0, "collection": change.collection, **change.fields})
            doc["n"] += 1
            if change.value is not None:
                doc["low"] = change.value if doc.get("low") is None else min(doc["low"], change.value)
                doc["high"] = change.value if doc.get("high") is None else max(doc["high"], change.value)
    for name in (COUNTS, TIES):
        await db[name].delete_many({})
        mine = [{k: v for k, v in d.items() if k != "collection"} for d in docs.values() if d["collection"] == name]
        for start in range(0, len(mine), 5000):
            await db[name].insert_many(mine[start : start + 5000], ordered=False)
    return counted


async def ensure_indexes(db: AsyncDatabase) -> None:
    """Counts are read by column; a bucket's parts by column, key and kind."""
    await db[COUNTS].create_index([("col", ASCENDING)])
    await db[TIES].create_index([("col", ASCENDING), ("key", ASCENDING), ("kind", ASCENDING)])
