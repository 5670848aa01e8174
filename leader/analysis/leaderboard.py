"""The leaderboard: every stored point as a row, sorted, filtered and paged by the leader from PerfDB.

Nothing about the rows is held in the leader between requests: its memory does not grow with them. A page is read
one of two ways (`page`):
- narrow: a filter that an index answers selects at most NARROW rows (a job's rows, a job name's, one model's, a
  range of a sortable column that few rows fall in): those are read, filtered and sorted here, and the total is exact;
- walk: the sort column's buckets are read in order with their counts (leader.store.rowcounts): buckets wholly before
  the page are skipped by their counts, and only the rows of the bucket(s) the page falls in are read (a bucket of
  rows tied on one value only in the tied parts it needs). With other filters, each bucket's rows are read and
  filtered until the page is full, and the total is counted on for at most COUNT_BUDGET more rows: past that it is a
  lower bound, and the page says so (`total_exact`). One equality filter on a sortable column with a bucket of its
  own (`valid:true`, `backend:triton`) is counted exactly.
Any column sorts a narrow selection; a whole leaderboard sorts by the sortable columns (rowcounts.SORTABLE). Offsets
stop at MAX_WINDOW rows (a page past it names `offset`): nobody pages 10,000 rows deep; filters find them.
"""

from __future__ import annotations

import re
from typing import Any

from pymongo.asynchronous.database import AsyncDatabase

from common.errors import InvalidRequest
from common.wire.analysis import LeaderboardPage, LeaderboardRow
from leader.store import leaderboard as store
from leader.store import rowbest, rowcounts

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
MAX_WINDOW = 10_000  # offset + limit
NARROW = 5000  # a selection read whole, filtered and sorted here
COUNT_BUDGET = 5000  # rows read past a full page to count a filtered total
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
            number, target = float(got), float(value)
            ok = {
                "=": number == target,
                "!=": number != target,
                "<": number < target,
                "<=": number <= target,
                ">": number > target,
                ">=": number >= target,
            }[op]
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
    present = [r for r in rows if r.get(col) is not None and r.get(col) == r.get(col)]
    absent = [r for r in rows if not (r.get(col) is not None and r.get(col) == r.get(col))]
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


async def _read(db: AsyncDatabase, query: dict[str, Any], teams: list[str] | None) -> list[dict[str, Any]]:
    """Rows of a query, per team in scope (each an index range on (team, column, id)), or over all teams."""
    if teams is None:
        return await store.find_rows(db, query).to_list(None)
    out: list[dict[str, Any]] = []
    for team in teams:
        out += await store.find_rows(db, {"team": team, **query}).to_list(None)
    return out


async def _narrow(db: AsyncDatabase, parsed: list[Filter], teams: list[str] | None) -> list[dict[str, Any]] | None:
    """The rows of the scope passing every filter, if one filter an index answers selects at most NARROW rows; else
    None."""
    for col, op, value in parsed:
        if col in {"job_id", "job_name"} and op == "=":
            rows = await store.find_rows(db, {col: value}).limit(NARROW + 1).to_list(None)
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
    rows = await _read(db, {col: _condition(col, op, value)}, sorted(best[2]))
    return [r for r in rows if matches(r, parsed)]


async def _bucket_rows(
    db: AsyncDatabase, col: str, b: rowcounts.Bucket, descending: bool, start: int, stop: int
) -> list[dict[str, Any]]:
    """Rows start..stop (in sort order) of one bucket: a bucket of rows tied on one value is read only in the tied
    parts (by id) that hold those positions; any other whole, then sorted."""
    if b.single(col) and b.n > 2 * (stop - start) + 200:
        value, out, seen = b.value(col), [], 0
        for part, teams in await rowcounts.ties(db, col, b.key, list(b.teams)):
            n = sum(teams.values())
            if seen + n > start and seen < stop:
                rows = await _read(db, rowcounts.tie_query(col, value, part), sorted(teams))
                rows = sorted((r for r in rows if r["_id"].startswith(part)), key=lambda r: r["_id"])
                out += rows[max(0, start - seen) : stop - seen]
            seen += n
        return out
    rows = await _read(db, rowcounts.query(col, b.key), sorted(b.teams))
    return sort_rows([r for r in rows if rowcounts.bucket(col, r.get(col)) == b.key], col, descending)[start:stop]


async def _walk(
    db: AsyncDatabase, col: str, descending: bool, parsed: list[Filter], teams: list[str] | None, offset: int, limit: int
) -> tuple[list[dict[str, Any]], int, bool]:
    """(the page's rows, the total, whether the total is exact) by walking the sort column's buckets."""
    need = offset + limit
    others = [f for f in parsed if not (f[0] == "team" and f[1] == "=")]
    buckets = rowcounts.ordered(await rowcounts.buckets(db, col, teams), descending)
    buckets = [b for b in buckets if all(_may_match(b, col, f) for f in others if f[0] == col)]
    window: list[dict[str, Any]] = []
    found = 0
    if not others:
        for b in buckets:
            if found < need and found + b.n > offset:
                window += await _bucket_rows(db, col, b, descending, max(0, offset - found), min(b.n, need - found))
            found += b.n
        return window, found, True
    scanned, exact = 0, True
    for b in buckets:
        if found >= need and scanned >= COUNT_BUDGET:
            exact = False
            break
        rows = await _bucket_rows(db, col, b, descending, 0, b.n)
        if found >= need:
            scanned += len(rows)
        for row in rows:
            if matches(row, others):
                if offset <= found < need:
                    window.append(row)
                found += 1
    counted = await _counted(db, others, teams)
    return window, (counted if counted is not None else found), exact or counted is not None


async def _counted(db: AsyncDatabase, others: list[Filter], teams: list[str] | None) -> int | None:
    """The exact number of rows passing one equality filter on a sortable column whose value is a bucket of its own
    (`valid:true`, `backend:triton`), from the counts; None for any other filters."""
    if len(others) != 1:
        return None
    col, op, value = others[0]
    key = rowcounts.bucket(col, value) if col in rowcounts.SORTABLE else None
    if op != "=" or key is None or not rowcounts.exact(col, key):
        return None
    return sum(b.n for b in await rowcounts.buckets(db, col, teams) if b.key == key and type(b.key) is type(key))


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


async def select(db: AsyncDatabase, filters: list[str], team: str | None = None) -> list[dict[str, Any]]:
    """Every row passing the filters (of `team`, when given): what the heat map, the recommender and the outlier test
    read (a narrow selection through its index, else the scope's rows)."""
    parsed = [parse_filter(text) for text in filters]
    teams = _scope(parsed, team)
    if teams == []:
        return []
    narrow = await _narrow(db, parsed, teams)
    if narrow is not None:
        return narrow
    rows = await _read(db, {}, teams)
    return [r for r in rows if matches(r, parsed)]
