"""The leaderboard: every stored point as a row, sorted, filtered and paged by the leader from PerfDB.

Nothing about the rows is held in the leader between requests but the pages last answered (at most CACHE_ROWS rows,
each served again only while the rows are unchanged): its memory does not grow with them. A page is read
one of two ways (`page`):
- narrow: a filter that an index answers selects at most NARROW rows (a job's rows, a job name's, one model's, a
  range of a sortable column that few rows fall in): those are read, filtered and sorted here, and the total is exact;
- walk (leader.analysis.boardwalk): the sort column's buckets are read in order with their counts: buckets wholly
  before the page are skipped by their counts, and only the rows of the bucket(s) the page falls in are read. With
  other filters, rows are read in growing runs until the page is full; the total counts the passing rows read, a
  lower bound the page says is one (`total_exact`), except for one filter on a sortable column that its buckets pass
  wholly or not at all (`valid:true`, `backend:triton`, `batch>=8`): that total is exact, from the counts.
The columns, filters and order are leader.analysis.boardquery's.
Any column sorts a narrow selection; a whole leaderboard sorts by the sortable columns (rowcounts.SORTABLE). Offsets
stop at MAX_WINDOW rows (a page past it names `offset`): nobody pages 10,000 rows deep; filters find them.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from pymongo.asynchronous.database import AsyncDatabase

from common.errors import InvalidRequest
from common.wire.analysis import LeaderboardPage, LeaderboardRow
from leader.analysis.boardquery import Filter, column, matches, parse_filter, sort_rows
from leader.analysis.boardwalk import Counts, condition, may_match, read_counts, read_rows, walk
from leader.store import leaderboard as store
from leader.store import rowbest, rowcounts

MAX_LIMIT = 1000
MAX_WINDOW = 10_000  # offset + limit
NARROW = 5000  # a selection read whole, filtered and sorted here
CACHE_ROWS = 20_000  # the rows of the pages a leader keeps answered, at most (the newest asked; whatever the board's size)


class _Pages:
    """The pages last answered, by (database, stamp, scope, query), the least recently asked dropped past CACHE_ROWS."""

    def __init__(self) -> None:
        self.pages: OrderedDict[tuple[Any, ...], LeaderboardPage] = OrderedDict()
        self.rows = 0

    def get(self, key: tuple[Any, ...]) -> LeaderboardPage | None:
        hit = self.pages.get(key)
        if hit is not None:
            self.pages.move_to_end(key)
        return hit

    def put(self, key: tuple[Any, ...], answer: LeaderboardPage) -> None:
        if key not in self.pages:
            self.pages[key] = answer
            self.rows += len(answer.rows)
        while self.rows > CACHE_ROWS:
            self.rows -= len(self.pages.popitem(last=False)[1].rows)


_cache = _Pages()


def to_row(doc: dict[str, Any], best: bool = False) -> LeaderboardRow:
    """A stored row document as the API's row."""
    fields = {k: v for k, v in doc.items() if k not in {"_id", "environment", "imported", store.PENDING}}
    return LeaderboardRow(id=doc["_id"], best=best, imported=(doc.get("imported") or {}).get("tool"), **fields)


def _scope(parsed: list[Filter], team: str | None) -> list[str] | None:
    """The teams whose rows are read: the caller's (None: every team's), narrowed by `team:` filters."""
    teams = None if team is None else [team]
    for col, op, value in parsed:
        if col == "team" and op == "=":
            teams = [value] if teams is None or value in teams else []
    return teams


async def _narrow(
    db: AsyncDatabase, parsed: list[Filter], teams: list[str] | None, counts: Counts, fields: dict[str, int] | None = None
) -> list[dict[str, Any]] | None:
    """The rows of the scope passing every filter (with `fields` only, when given), if one filter an index answers
    selects at most NARROW rows (by `counts`, which holds every sortable filter column's buckets); else None."""
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
        for b in counts[col]:
            if may_match(b, col, f):
                for team, n in b.teams.items():
                    per_team[team] = per_team.get(team, 0) + n
        if best is None or sum(per_team.values()) < sum(best[2].values()):
            best = (sum(per_team.values()), f, per_team)
    if best is None or best[0] > NARROW:
        return None
    col, op, value = best[1]
    rows = await read_rows(db, {col: condition(col, op, value)}, sorted(best[2]), fields)
    return [r for r in rows if matches(r, parsed)]


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
    """One sorted, filtered page (of `team`'s rows, when given) and the total count: from the cache while the rows'
    stamp is the one it was read at (leader.store.leaderboard.restamp), else read."""
    col = _check(sort, order, limit, offset)
    parsed = [parse_filter(text) for text in filters]
    stamp = await store.stamp(db)
    key = (db.name, stamp, team, col, order, tuple(filters), limit, offset)
    if stamp is not None and (hit := _cache.get(key)) is not None:
        return hit
    teams = _scope(parsed, team)
    descending = order == "desc"
    counts = await read_counts(db, [col, *(f[0] for f in parsed)], teams)
    narrow = [] if teams == [] else await _narrow(db, parsed, teams, counts)
    if narrow is not None:
        rows, total, exact = sort_rows(narrow, col, descending)[offset : offset + limit], len(narrow), True
    elif col not in rowcounts.SORTABLE:
        raise InvalidRequest(
            f"the whole leaderboard sorts by {', '.join(rowcounts.SORTABLE)}; sorting by {col} needs a filter that "
            f"selects at most {NARROW} rows (a job_id, a job_name, a model)",
            field="sort",
        )
    else:
        rows, total, exact = await walk(db, col, descending, parsed, teams, (offset, limit), counts)
    best = await rowbest.best_ids(db, [(r["team"], r["model"]) for r in rows])
    answer = LeaderboardPage(
        rows=[to_row(doc, doc["_id"] in best) for doc in rows],
        total=total,
        total_exact=exact,
        sort=col,
        order="desc" if descending else "asc",
        filters=filters,
        limit=limit,
        offset=offset,
    )
    if stamp is not None:
        _cache.put(key, answer)
    return answer


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
    narrow = await _narrow(db, parsed, teams, await read_counts(db, [f[0] for f in parsed], teams), fields)
    if narrow is not None:
        return narrow
    rows = await read_rows(db, {}, teams, fields)
    return [r for r in rows if matches(r, parsed)]
