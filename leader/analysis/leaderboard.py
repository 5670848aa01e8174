"""The leaderboard: every stored point as a row, sorted, filtered and paged by the leader from PerfDB.

Nothing about the rows is held in the leader between requests: its memory does not grow with them. A page is read
one of two ways (`page`):
- narrow: a filter that an index answers selects at most NARROW rows (a job's rows, a job name's, one model's, a
  range of a sortable column that few rows fall in): those are read, filtered and sorted here, and the total is exact;
- walk: the sort column's buckets are read in order with their counts (leader.store.rowcounts): buckets wholly before
  the page are skipped by their counts, and only the rows of the bucket(s) the page falls in are read (a big bucket
  only in the parts it needs: by finer value, or by id for rows tied on one value). With other filters, each bucket's
  rows are read and filtered until the page is full, and the total is counted on for at most COUNT_BUDGET more rows:
  past that it is a lower bound, and the page says so (`total_exact`). One filter on a sortable column that its
  buckets pass wholly or not at all (`valid:true`, `backend:triton`, `batch>=8`) is counted exactly from the counts.
Any column sorts a narrow selection; a whole leaderboard sorts by the sortable columns (rowcounts.SORTABLE). Offsets
stop at MAX_WINDOW rows (a page past it names `offset`): nobody pages 10,000 rows deep; filters find them.
"""

from __future__ import annotations

import operator
import re
from collections.abc import AsyncIterator
from typing import Any

from pymongo.asynchronous.database import AsyncDatabase

from common.errors import InvalidRequest
from common.wire.analysis import LeaderboardPage, LeaderboardRow
from leader.store import leaderboard as store
from leader.store import rowbest, rowcounts

# Every column filters; the sortable ones (rowcounts: counted per sort bucket) first, then those that only filter.
NUMERIC = rowcounts.NUMBERS + (
    "p99_ci_high_ms",
    "service_p99_ms",
    "requests",
    "errors",
    "co2_g_per_1m",
    "index",
    "attempt",
    "repeat",
    "slo_p99_ms",
    "depth",
    "width",
    "input_size",
    "flops_per_inference",
    "bytes_per_inference",
    "ttft_p99_ci_high_ms",
    "search_lowest_fail",
    "search_probes",
)
TEXT = rowcounts.TEXT + (
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
BOOL = rowcounts.FLAGS + ("slo_met",)
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
MAX_WINDOW = 10_000  # offset + limit
NARROW = 5000  # a selection read whole, filtered and sorted here
COUNT_BUDGET = 500  # rows read past a full page to count a filtered total
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


Filter = tuple[str, str, Any]
RANGES = {"<": "$lt", "<=": "$lte", ">": "$gt", ">=": "$gte"}
COMPARE = {"=": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge}


def _text(value: Any) -> str:
    """A text column's value: a list (tags) as its items joined by commas."""
    return ",".join(str(v) for v in value) if isinstance(value, list) else str(value)


def matches(row: dict[str, Any], filters: list[Filter]) -> bool:
    """Whether a row passes every filter: numbers compare when present (an absent value passes none, `!=` neither),
    flags are numbers 1/0, tags hold the value among them, other text matches exactly (`!=` passes absent text)."""
    for col, op, value in filters:
        got = row.get(col)
        if col in NUMERIC or col in BOOL:
            if got is None or got != got:  # absent, or NaN
                return False
            ok = COMPARE[op](float(got), float(value))
        elif col == "tags":
            ok = (value in (got or [])) == (op == "=")
        else:
            ok = (got is not None and _text(got) == value) == (op == "=")
        if not ok:
            return False
    return True


def sort_rows(rows: list[dict[str, Any]], col: str, descending: bool) -> list[dict[str, Any]]:
    """Rows in sort order: by the column (text by its characters, flags as 0/1), absent values last either way, ties
    by id."""
    rows = sorted(rows, key=lambda r: r["_id"])
    present = [r for r in rows if r.get(col) is not None and r[col] == r[col]]  # (NaN is absent)
    absent = [r for r in rows if r.get(col) is None or r[col] != r[col]]
    if col in NUMERIC or col in BOOL:
        present.sort(key=lambda r: float(r[col]), reverse=descending)
    else:
        present.sort(key=lambda r: _text(r[col]), reverse=descending)
    return present + absent


def to_row(doc: dict[str, Any], best: bool = False) -> LeaderboardRow:
    """A stored row document as the API's row."""
    fields = {k: v for k, v in doc.items() if k not in {"_id", "environment", store.PENDING}}
    return LeaderboardRow(id=doc["_id"], best=best, **fields)


def _scope(parsed: list[Filter], team: str | None) -> list[str] | None:
    """The teams whose rows are read: the caller's (None: every team's), narrowed by `team:` filters."""
    teams = None if team is None else [team]
    for col, op, value in parsed:
        if col == "team" and op == "=":
            teams = [value] if teams is None or value in teams else []
    return teams


def _may_match(b: rowcounts.Bucket, col: str, f: Filter) -> bool:
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


def _condition(col: str, op: str, value: Any) -> Any:
    return value if op == "=" else {RANGES[op]: value}


async def _read(
    db: AsyncDatabase, query: dict[str, Any], teams: list[str] | None, fields: dict[str, int] | None = None
) -> list[dict[str, Any]]:
    """Rows of a query, per team in scope (each an index range on (team, column, id)), or over all teams."""
    if teams is None:
        return await store.find_rows(db, query, fields).to_list(None)
    out: list[dict[str, Any]] = []
    for team in teams:
        out += await store.find_rows(db, {"team": team, **query}, fields).to_list(None)
    return out


async def _narrow(
    db: AsyncDatabase, parsed: list[Filter], teams: list[str] | None, fields: dict[str, int] | None = None
) -> list[dict[str, Any]] | None:
    """The rows of the scope passing every filter (with `fields` only, when given), if one filter an index answers
    selects at most NARROW rows; else None."""
    for col, op, value in parsed:
        if col in {"job_id", "job_name"} and op == "=":
            rows = await store.find_rows(db, {col: value}, fields).limit(NARROW + 1).to_list(None)
            if len(rows) <= NARROW:
                return [r for r in rows if (teams is None or r.get("team") in teams) and matches(r, parsed)]
    best: tuple[int, Filter, dict[str, int]] | None = None
    for f in parsed:
        col, op, value = f
        if col not in rowcounts.SORTABLE or op == "!=":
            continue
        per_team: dict[str, int] = {}
        for b in await rowcounts.buckets(db, col, teams):
            if _may_match(b, col, f):
                for team, n in b.teams.items():
                    per_team[team] = per_team.get(team, 0) + n
        if best is None or sum(per_team.values()) < sum(best[2].values()):
            best = (sum(per_team.values()), f, per_team)
    if best is None or best[0] > NARROW:
        return None
    col, op, value = best[1]
    rows = await _read(db, {col: _condition(col, op, value)}, sorted(best[2]), fields)
    return [r for r in rows if matches(r, parsed)]


PART_READ = 200  # a bucket at least this big is read by its parts
Chunks = AsyncIterator[list[dict[str, Any]]]


async def _by_parts(
    db: AsyncDatabase, col: str, b: rowcounts.Bucket, descending: bool, fields: dict[str, int], span: tuple[int, int]
) -> Chunks | None:
    """Rows start..stop (`span`) of a big bucket read by its parts: by the first characters of the id for rows tied on
    one value (their order), by finer value for a number bucket. Only the parts holding those positions are read: in
    one read, or (the whole bucket asked, by a caller that may stop early) in reads of 1, 2, 4, ... parts. None where
    the bucket has no parts that add up to it."""
    kind = "id" if b.single(col) else ("fine" if col in rowcounts.NUMBERS and isinstance(b.key, int) and b.key else "")
    found = await rowcounts.parts(db, col, b.key, list(b.teams), kind) if kind else []
    if sum(sum(per.values()) for _, per in found) != b.n:
        return None
    if kind == "fine" and descending:
        found.reverse()
    start, stop = span
    grow = stop - start == b.n
    wanted, seen = [], 0  # (part, rows per team, position of its first row)
    for part, per_team in found:
        n = sum(per_team.values())
        if seen + n > start and seen < stop:
            wanted.append((part, per_team, seen))
        seen += n

    async def chunks() -> Chunks:
        batch, rest = 1, wanted
        while rest:
            take, rest = (rest[:batch], rest[batch:]) if grow else (rest, [])
            batch *= 2
            teams = sorted({t for _, per, _ in take for t in per})
            at, names = take[0][2], [p for p, _, _ in take]
            if kind == "id":
                rows = await _read(db, rowcounts.tie_query(col, b.value(col), names[0], names[-1]), teams, fields)
                rows.sort(key=lambda r: r["_id"])
            else:
                assert isinstance(b.key, int)
                query = rowcounts.fine_query(col, b.key, min(names), max(names))
                rows = [r for r in await _read(db, query, teams, fields) if rowcounts.fine(col, r.get(col)) in set(names)]
                rows = sort_rows(rows, col, descending)
            yield rows[max(0, start - at) : max(0, stop - at)]

    return chunks()


async def _chunks(
    db: AsyncDatabase, col: str, b: rowcounts.Bucket, descending: bool, fields: dict[str, int], start: int, stop: int
) -> Chunks:
    """Rows start..stop of one bucket in sort order, in chunks: a big bucket by its parts, any other read whole and
    sorted here."""
    if b.n >= PART_READ and (stop - start < b.n // 2 or stop - start == b.n):
        parted = await _by_parts(db, col, b, descending, fields, (start, stop))
        if parted is not None:
            async for rows in parted:
                yield rows
            return
    rows = await _read(db, rowcounts.query(col, b.key), sorted(b.teams), fields)
    yield sort_rows([r for r in rows if rowcounts.bucket(col, r.get(col)) == b.key], col, descending)[start:stop]


async def _walk(
    db: AsyncDatabase, col: str, descending: bool, parsed: list[Filter], teams: list[str] | None, offset: int, limit: int
) -> tuple[list[dict[str, Any]], int, bool]:
    """(the page's rows, the total, whether the total is exact) by walking the sort column's buckets. Rows are read
    with only what sorting and filtering need; the page's own rows are then read whole by id."""
    need = offset + limit
    others = [f for f in parsed if not (f[0] == "team" and f[1] == "=")]
    fields = {"_id": 1, "team": 1, col: 1, **{f[0]: 1 for f in others}}
    buckets = rowcounts.ordered(await rowcounts.buckets(db, col, teams), descending)
    buckets = [b for b in buckets if all(_may_match(b, col, f) for f in others if f[0] == col)]
    window: list[dict[str, Any]] = []
    found, exact = 0, True
    if not others:
        for b in buckets:
            if found < need and found + b.n > offset:
                async for rows in _chunks(db, col, b, descending, fields, max(0, offset - found), min(b.n, need - found)):
                    window += rows
            found += b.n
        return await _whole(db, window), found, True
    counted = await _counted(db, others, teams)
    scanned = 0

    def enough() -> bool:
        return found >= need and (counted is not None or scanned >= COUNT_BUDGET)

    for b in buckets:
        async for rows in _chunks(db, col, b, descending, fields, 0, b.n):
            if found >= need:
                scanned += len(rows)
            for row in rows:
                if matches(row, others):
                    if offset <= found < need:
                        window.append(row)
                    found += 1
            if enough():
                break
        if enough():
            exact = counted is not None
            break
    return await _whole(db, window), (counted if counted is not None else found), exact


async def _whole(db: AsyncDatabase, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows read whole, in the given order."""
    docs = {d["_id"]: d for d in await store.find_rows(db, {"_id": {"$in": [r["_id"] for r in rows]}}).to_list(None)}
    return [docs[r["_id"]] for r in rows if r["_id"] in docs]


def _all_match(b: rowcounts.Bucket, col: str, f: Filter) -> bool:
    """Whether every row of a bucket of `col` passes a filter on `col` (its least and greatest value both do: they
    bound what it holds, also after deletions)."""
    _, op, value = f
    if b.key is None or op == "!=":
        return False
    if col in rowcounts.TEXT or col in rowcounts.FLAGS:
        return op == "=" and rowcounts.exact(col, b.key) and b.key == rowcounts.bucket(col, value)
    return b.low is not None and b.high is not None and matches({col: b.low}, [f]) and matches({col: b.high}, [f])


async def _counted(db: AsyncDatabase, others: list[Filter], teams: list[str] | None) -> int | None:
    """The exact number of rows passing one filter on a sortable column, from its counts, where every bucket passes
    it wholly or not at all (`valid:true`, `backend:triton`, `batch>=8`); None otherwise."""
    if len(others) != 1 or others[0][0] not in rowcounts.SORTABLE or others[0][1] == "!=":
        return None
    col, total = others[0][0], 0
    for b in await rowcounts.buckets(db, col, teams):
        if _all_match(b, col, others[0]):
            total += b.n
        elif _may_match(b, col, others[0]):
            return None
    return total


def _check(sort: str, order: str, limit: int, offset: int) -> str:
    col = column(sort, "sort")
    if order not in {"asc", "desc"}:
        raise InvalidRequest("order must be asc or desc", field="order")
    if not 1 <= limit <= MAX_LIMIT:
        raise InvalidRequest(f"limit must be in [1, {MAX_LIMIT}]", field="limit")
    if offset < 0:
        raise InvalidRequest("offset must be >= 0", field="offset")
    if offset + limit > MAX_WINDOW:
        raise InvalidRequest(f"offset + limit must be at most {MAX_WINDOW}: narrow the rows with a filter", field="offset")
    return col


async def page(
    db: AsyncDatabase, *, sort: str, order: str, filters: list[str], limit: int, offset: int, team: str | None = None
) -> LeaderboardPage:
    """One sorted, filtered page (of `team`'s rows, when given) and the total count."""
    col = _check(sort, order, limit, offset)
    parsed = [parse_filter(text) for text in filters]
    teams = _scope(parsed, team)
    descending = order == "desc"
    narrow = [] if teams == [] else await _narrow(db, parsed, teams)
    if narrow is not None:
        rows, total, exact = sort_rows(narrow, col, descending)[offset : offset + limit], len(narrow), True
    elif col not in rowcounts.SORTABLE:
        raise InvalidRequest(
            f"the whole leaderboard sorts by {', '.join(rowcounts.SORTABLE)}; sorting by {col} needs a filter that "
            f"selects at most {NARROW} rows (a job_id, a job_name, a model)",
            field="sort",
        )
    else:
        rows, total, exact = await _walk(db, col, descending, parsed, teams, offset, limit)
    best = await rowbest.best_ids(db, [(r["team"], r["model"]) for r in rows])
    return LeaderboardPage(
        rows=[to_row(doc, doc["_id"] in best) for doc in rows],
        total=total,
        total_exact=exact,
        sort=col,
        order="desc" if descending else "asc",
        filters=filters,
        limit=limit,
        offset=offset,
    )


async def select(
    db: AsyncDatabase, filters: list[str], team: str | None = None, columns: tuple[str, ...] = ()
) -> list[dict[str, Any]]:
    """Every row passing the filters (of `team`, when given; only `columns` of it, when given): what the heat map, the
    recommender and the outlier test read (a narrow selection through its index, else every row of the scope)."""
    parsed = [parse_filter(text) for text in filters]
    teams = _scope(parsed, team)
    if teams == []:
        return []
    fields = {"_id": 1, "team": 1, **{c: 1 for c in columns}, **{f[0]: 1 for f in parsed}} if columns else None
    narrow = await _narrow(db, parsed, teams, fields)
    if narrow is not None:
        return narrow
    rows = await _read(db, {}, teams, fields)
    return [r for r in rows if matches(r, parsed)]
