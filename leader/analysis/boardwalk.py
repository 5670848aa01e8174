"""Walking the sort column's buckets (leader.store.rowcounts) for a page of the whole leaderboard: the buckets wholly
before the page are skipped by their counts; the rows of the ones it falls in are read, consecutive small buckets
together and a big one only in the parts that hold the page (by finer value, or by id for rows tied on one value).
With filters, rows are read in growing runs from the page's start until enough pass.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from pymongo.asynchronous.database import AsyncDatabase

from leader.analysis.boardquery import BOOL, NUMERIC, RANGES, Filter, matches, sort_rows
from leader.store import leaderboard as store
from leader.store import rowcounts


def may_match(b: rowcounts.Bucket, col: str, f: Filter) -> bool:
    """Whether a bucket of `col` can hold a row passing a filter on `col` (by its least and greatest value)."""
    _, op, value = f
    if b.key is None:
        return op == "!=" and col not in NUMERIC and col not in BOOL
    if op == "!=":
        return True
    if col in rowcounts.TEXT or col in rowcounts.FLAGS:
        return op == "=" and b.key == rowcounts.bucket(col, value)
    low, high = float(b.low if b.low is not None else "-inf"), float(b.high if b.high is not None else "inf")
    return {"=": low <= value <= high, "<": low < value, "<=": low <= value, ">": high > value, ">=": high >= value}[op]


def condition(col: str, op: str, value: Any) -> Any:
    return value if op == "=" else {RANGES[op]: value}


async def read_rows(
    db: AsyncDatabase, query: dict[str, Any], teams: list[str] | None, fields: dict[str, int] | None = None
) -> list[dict[str, Any]]:
    """Rows of a query, per team in scope (each an index range on (team, column, id)), or over all teams."""
    if teams is None:
        return await store.find_rows(db, query, fields).to_list(None)
    out: list[dict[str, Any]] = []
    for team in teams:
        out += await store.find_rows(db, {"team": team, **query}, fields).to_list(None)
    return out


PART_READ = 32  # a bucket whose whole read would bring this many rows more than wanted is read by its parts
FIRST_READ = 64  # the fewest rows a filtered walk reads at once (each read after its first: at most 4 times the last)
SPARSE = 5  # a read bringing more than this many rows per row kept reads only what sorting and filtering need
Segment = tuple[rowcounts.Bucket, int, int]  # a bucket and the positions start..stop of its rows wanted
Chunks = AsyncIterator[list[dict[str, Any]]]
Counts = dict[str, list[rowcounts.Bucket]]  # a column's buckets (rowcounts.buckets), by column
Fields = dict[str, int] | None  # a projection: the rows come back marked SORTED_ONLY, to be read whole if kept
SORTED_ONLY = "\x00sorted only"


async def _fetch(db: AsyncDatabase, query: dict[str, Any], teams: list[str], fields: Fields) -> list[dict[str, Any]]:
    rows = await read_rows(db, query, teams, fields)
    if fields is not None:
        for row in rows:
            row[SORTED_ONLY] = True
    return rows


async def _run(db: AsyncDatabase, col: str, run: list[Segment], descending: bool, fields: Fields) -> list[dict[str, Any]]:
    """Consecutive buckets' rows in sort order, read together (an index range per team): the first's from its start,
    the last's to its stop, every one between whole."""
    keys = [b.key for b, _, _ in run]
    rows = await _fetch(db, rowcounts.span(col, keys), sorted({t for b, _, _ in run for t in b.teams}), fields)
    wanted = set(keys)
    ordered = sort_rows([r for r in rows if rowcounts.bucket(col, r.get(col)) in wanted], col, descending)
    return ordered[run[0][1] : sum(b.n for b, _, _ in run[:-1]) + run[-1][2]]


async def _parts(db: AsyncDatabase, col: str, b: rowcounts.Bucket, descending: bool) -> tuple[str, list[Any]] | None:
    """A bucket's parts in sort order, each (part, its rows per team, position of its first row), and their kind: by
    the first characters of the id for rows tied on one value (their order), by finer value for a number bucket.
    None where the bucket has no parts that add up to it."""
    kind = "id" if b.single(col) else ("fine" if col in rowcounts.NUMBERS and isinstance(b.key, int) and b.key else "")
    found = await rowcounts.parts(db, col, b.key, list(b.teams), kind) if kind else []
    if sum(sum(per.values()) for _, per in found) != b.n:
        return None
    if kind == "fine" and descending:
        found.reverse()
    out, seen = [], 0
    for part, per_team in found:
        out.append((part, per_team, seen))
        seen += sum(per_team.values())
    return kind, out


async def _read_parts(
    db: AsyncDatabase, col: str, b: rowcounts.Bucket, kind: str, take: list[Any], descending: bool, fields: Fields
) -> list[dict[str, Any]]:
    """The rows of consecutive parts of a bucket (`take`, as _parts gives them), in sort order."""
    teams = sorted({t for _, per, _ in take for t in per})
    names = [p for p, _, _ in take]
    if kind == "id":
        rows = await _fetch(db, rowcounts.tie_query(col, b.value(col), names[0], names[-1]), teams, fields)
        return sorted(rows, key=lambda r: r["_id"])
    assert isinstance(b.key, int)
    wanted = set(names)
    rows = await _fetch(db, rowcounts.fine_query(col, b.key, min(names), max(names)), teams, fields)
    return sort_rows([r for r in rows if rowcounts.fine(col, r.get(col)) in wanted], col, descending)


def _sparse(col: str, reading: int, keeping: int) -> Fields:
    """What to read of rows when `reading` of them keep `keeping`: all but the reproducibility record, or (a sparse
    read) what sorting needs."""
    return {"_id": 1, "team": 1, col: 1} if reading > SPARSE * keeping else None


async def _segments(db: AsyncDatabase, col: str, descending: bool, segments: list[Segment]) -> list[dict[str, Any]]:
    """The rows of the segments, in sort order: consecutive buckets read whole together, a bucket whose whole read
    would bring PART_READ rows or more past its segment only in the parts that hold it."""
    out: list[dict[str, Any]] = []
    run: list[Segment] = []

    async def flush() -> None:
        if run:
            fields = _sparse(col, sum(b.n for b, _, _ in run), sum(stop - start for _, start, stop in run))
            out.extend(await _run(db, col, run, descending, fields))
            run.clear()

    for segment in segments:
        b, start, stop = segment
        if b.n - (stop - start) < PART_READ and b.key is not None and col not in rowcounts.FLAGS:
            run.append(segment)
            continue
        await flush()
        parted = await _parts(db, col, b, descending) if b.n - (stop - start) >= PART_READ else None
        if parted is None:
            out += await _run(db, col, [segment], descending, _sparse(col, b.n, stop - start))
            continue
        kind, found = parted
        take = [p for p in found if p[2] + sum(p[1].values()) > start and p[2] < stop]
        reading = sum(sum(p[1].values()) for p in take)
        rows = await _read_parts(db, col, b, kind, take, descending, _sparse(col, reading, stop - start))
        out += rows[start - take[0][2] : stop - take[0][2]]
    await flush()
    return await _whole(db, out)


@dataclass
class _Reads:
    """What a filtered walk's next read brings: about `want` rows, with `fields` only (None: whole)."""

    want: int
    fields: Fields


async def _chunks(db: AsyncDatabase, col: str, descending: bool, buckets: list[rowcounts.Bucket], reads: _Reads) -> Chunks:
    """Every row of the buckets in sort order, in reads of about `reads.want` rows as it stands at each read:
    consecutive small buckets read together, a bigger bucket by runs of its parts."""
    run: list[Segment] = []
    held = 0  # the rows of the buckets in `run`
    for b in buckets:
        over = held + b.n - reads.want  # rows past the read's want, were the bucket read whole
        parted = await _parts(db, col, b, descending) if over >= PART_READ and b.n >= PART_READ else None
        joins = parted is None and b.key is not None and col not in rowcounts.FLAGS
        if run and not joins:
            yield await _run(db, col, run, descending, reads.fields)
            run, held = [], 0
        if joins:
            run.append((b, 0, b.n))
            held += b.n
            if held >= reads.want:
                yield await _run(db, col, run, descending, reads.fields)
                run, held = [], 0
        elif parted is None:
            yield await _run(db, col, [(b, 0, b.n)], descending, reads.fields)
        else:
            found = parted[1]
            while found:
                take, n = [], 0
                while found and n < reads.want:
                    take.append(found.pop(0))
                    n += sum(take[-1][1].values())
                yield await _read_parts(db, col, b, parted[0], take, descending, reads.fields)
    if run:
        yield await _run(db, col, run, descending, reads.fields)


async def read_counts(db: AsyncDatabase, cols: list[str], teams: list[str] | None) -> Counts:
    """The buckets of each sortable column among `cols` (read at once)."""
    names = sorted({c for c in cols if c in rowcounts.SORTABLE})
    return dict(zip(names, await asyncio.gather(*(rowcounts.buckets(db, c, teams) for c in names)), strict=True))


async def walk(
    db: AsyncDatabase,
    col: str,
    descending: bool,
    parsed: list[Filter],
    teams: list[str] | None,
    window: tuple[int, int],
    counts: Counts,
) -> tuple[list[dict[str, Any]], int, bool]:
    """(the page's rows at `window` (offset, limit), the total, whether the total is exact) by walking the sort
    column's buckets (`counts` holds them, and every sortable filter column's). With filters, each read is sized by
    the share of rows that pass them: first as the counts tell it (each filter on a sortable column by its buckets,
    the filters taken as independent), then as the rows read so far do."""
    offset, limit = window
    need = offset + limit
    others = [f for f in parsed if not (f[0] == "team" and f[1] == "=")]
    buckets = rowcounts.ordered(counts[col], descending)
    buckets = [b for b in buckets if all(may_match(b, col, f) for f in others if f[0] == col)]
    if not others:
        segments: list[Segment] = []
        found = 0
        for b in buckets:
            if found < need and found + b.n > offset:
                segments.append((b, max(0, offset - found), min(b.n, need - found)))
            found += b.n
        return await _segments(db, col, descending, segments), found, True
    counted = _counted(counts, others)
    share = 1.0
    for f in others:
        share *= _share(counts[f[0]], f) if f[0] in counts and f[0] != col else 1.0
    sparse = {"_id": 1, "team": 1, col: 1, **{f[0]: 1 for f in others}}
    reads = _Reads(want=0, fields=None)
    page: list[dict[str, Any]] = []
    found = read = 0

    def plan() -> None:  # the next read: the rows the page still needs at the share passing so far (the counts' first)
        passing = found / read if read else share
        wanted = max(FIRST_READ, int((need - found) / max(passing, 0.001) * 1.25))
        reads.want = min(wanted, 4 * reads.want) if read else wanted
        reads.fields = sparse if reads.want > SPARSE * (need - max(found, offset)) else None

    plan()
    async for rows in _chunks(db, col, descending, buckets, reads):
        read += len(rows)
        for row in rows:
            if matches(row, others):
                if offset <= found < need:
                    page.append(row)
                found += 1  # every passing row read counts, past the page too
        if found >= need:
            break
        plan()
    else:
        return await _whole(db, page), found, True  # every bucket read
    return await _whole(db, page), (counted if counted is not None else found), counted is not None


async def _whole(db: AsyncDatabase, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows in the given order, those read sparse read again whole (by id, in one read; a row deleted since is
    left out)."""
    sparse = [r["_id"] for r in rows if SORTED_ONLY in r]
    if not sparse:
        return rows
    docs = {d["_id"]: d for d in await store.find_rows(db, {"_id": {"$in": sparse}}).to_list(None)}
    return [docs[r["_id"]] if SORTED_ONLY in r else r for r in rows if SORTED_ONLY not in r or r["_id"] in docs]


def _all_match(b: rowcounts.Bucket, col: str, f: Filter) -> bool:
    """Whether every row of a bucket of `col` passes a filter on `col` (its least and greatest value both do: they
    bound what it holds, also after deletions)."""
    _, op, value = f
    if b.key is None or op == "!=":
        return False
    if col in rowcounts.TEXT or col in rowcounts.FLAGS:
        return op == "=" and rowcounts.exact(col, b.key) and b.key == rowcounts.bucket(col, value)
    return b.low is not None and b.high is not None and matches({col: b.low}, [f]) and matches({col: b.high}, [f])


def _counted(counts: Counts, others: list[Filter]) -> int | None:
    """The exact number of rows passing one filter on a sortable column, from its counts, where every bucket passes
    it wholly or not at all (`valid:true`, `backend:triton`, `batch>=8`); None otherwise."""
    if len(others) != 1 or others[0][0] not in counts or others[0][1] == "!=":
        return None
    col, total = others[0][0], 0
    for b in counts[col]:
        if _all_match(b, col, others[0]):
            total += b.n
        elif may_match(b, col, others[0]):
            return None
    return total


def _share(buckets: list[rowcounts.Bucket], f: Filter) -> float:
    """About what share of the rows pass a filter on a sortable column: its buckets that pass wholly, and half of
    those that may pass in part."""
    col = f[0]
    passing = sum(b.n if _all_match(b, col, f) else b.n / 2 if may_match(b, col, f) else 0 for b in buckets)
    return passing / max(1, sum(b.n for b in buckets))
