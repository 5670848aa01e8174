"""The leaderboard read from PerfDB page by page (leader.analysis.leaderboard over leader.store.rowcounts/rowbest),
against a brute-force Python sort of the same rows: every sort, direction, filter, offset and team scope gives the same
rows in the same order and the same total; counts kept row by row (writes, rewrites, deletions) equal a recount from
scratch; a row left pending by a stopped leader is recounted at start; the best under SLO is the brute force's."""

from __future__ import annotations

import asyncio
import random
import uuid
from typing import Any

import pytest
from pymongo import AsyncMongoClient

from common.errors import InvalidRequest
from leader.analysis import boardquery, boardwalk, leaderboard
from leader.store import leaderboard as store
from leader.store import rowbest, rowcounts

pytestmark = pytest.mark.integration


def make_rows(n: int, seed: int = 3) -> list[dict[str, Any]]:
    """Rows with many ties (one rate, one hardware for all, two batch sizes), absent values and two teams."""
    rng = random.Random(seed)
    jobs = [uuid.UUID(int=rng.getrandbits(128)).hex for _ in range(n // 8)]
    jobs[0] = "f0" + jobs[0][2:]  # its rows' tied part "f0", and every p50 (1.0) in finer part 0 of its bucket
    out = []
    for i in range(n):
        job = jobs[i % len(jobs)]
        out.append(
            {
                "_id": f"{job}:{i}",
                "job_id": job,
                "job_name": f"name{i % 5}",
                "team": "alpha" if i % 3 else "beta",
                "attempt": 1,
                "index": i,
                "model": ["m0", "m1", "m2" + "-long" * 16][i % 3],  # a name longer than a text bucket's prefix
                "backend": rng.choice(["onnxruntime", "triton"]),
                "hardware": "cpu",
                "follower_id": "f",
                "batch_size": rng.choice([1, 8]),
                "pattern": "poisson",
                "rate": 50.0,
                "load": "poisson 50/s",
                "repeat": 0,
                "options": "",
                "role": "",
                "throughput": rng.choice([None, 10.0, 20.0, rng.uniform(0, 100)]),
                "samples_per_s": None,
                "p50_ms": 1.0,
                "p99_ms": rng.choice([None, 5.0, rng.uniform(0.01, 5000)]),
                "valid": rng.random() > 0.2,
                "slo_p99_ms": 20.0,
                "slo_met": None,
                "requests": 1,
                "errors": 0,
                "tags": [],
            }
        )
        row = out[-1]
        if row["throughput"] is not None:
            row["samples_per_s"] = row["throughput"] * row["batch_size"]
    return out


PREDICATES = {
    "backend:triton": lambda r: r["backend"] == "triton",
    "valid:true": lambda r: r["valid"] is True,
    "batch>=8": lambda r: r["batch_size"] >= 8,
    "p99<20": lambda r: r["p99_ms"] is not None and r["p99_ms"] < 20,
    "p99>=100": lambda r: r["p99_ms"] is not None and r["p99_ms"] >= 100,
    "p99<1000": lambda r: r["p99_ms"] is not None and r["p99_ms"] < 1000,
    "model!=m1": lambda r: r["model"] != "m1",
    "job_name:name2": lambda r: r["job_name"] == "name2",
    "team:beta": lambda r: r["team"] == "beta",
}
CASES = [
    ("p99_ms", "asc", []),
    ("p99_ms", "desc", []),
    ("rate", "asc", []),  # one value: read by tied parts
    ("hardware", "desc", []),
    ("throughput", "desc", ["valid:true", "batch>=8"]),
    ("p99_ms", "desc", ["backend:triton"]),
    ("backend", "asc", ["p99<20"]),
    ("p99_ms", "asc", ["p99>=100"]),
    ("model", "desc", ["model!=m1"]),
    ("valid", "asc", ["team:beta"]),
    ("index", "desc", ["job_name:name2"]),  # any column sorts a narrow selection
    ("samples_per_s", "asc", ["valid:true"]),
    ("rate", "desc", ["backend:triton"]),  # tied rows read by growing runs of parts, filtered
    ("hardware", "asc", ["p99<20", "valid:true"]),
    ("p99_ms", "desc", ["batch>=8"]),  # counted exactly: each batch bucket passes wholly or not at all
    ("valid", "desc", ["p99<1000"]),
]


def expected(rows: list[dict[str, Any]], sort: str, order: str, filters: list[str], team: str | None) -> list[str]:
    matching = [r for r in rows if (team is None or r["team"] == team) and all(PREDICATES[f](r) for f in filters)]
    present = sorted((r for r in matching if r.get(sort) is not None), key=lambda r: r["_id"])
    present.sort(key=lambda r: r[sort], reverse=order == "desc")  # stable: ties stay in id order
    return [r["_id"] for r in present + sorted((r for r in matching if r.get(sort) is None), key=lambda r: r["_id"])]


async def check_pages(db: Any, rows: list[dict[str, Any]]) -> None:
    for sort, order, filters in CASES:
        if sort not in rowcounts.SORTABLE and leaderboard.NARROW < 100:
            continue  # only a narrow selection sorts by it
        for team in (None, "alpha"):
            want = expected(rows, sort, order, filters, team)
            for offset, limit in ((0, 25), (7, 25), (60, 40), (len(want) - 3, 10)):
                offset = max(0, offset)
                got = await leaderboard.page(db, sort=sort, order=order, filters=filters, limit=limit, offset=offset, team=team)
                case = f"sort={sort} {order} filters={filters} team={team} offset={offset}"
                assert [r.id for r in got.rows] == want[offset : offset + limit], case
                if got.total_exact:
                    assert got.total == len(want), case
                else:
                    assert len(want) >= got.total >= offset + len(got.rows), case
    # The best under SLO: per team and model, what a scan of every row finds.
    best = {row["_id"] for row in rowbest.best_rows(r for r in rows if r.get("valid")).values()}
    page = await leaderboard.page(db, sort="p99_ms", order="asc", filters=[], limit=1000, offset=0)
    assert {r.id for r in page.rows if r.best} == best
    assert best  # the data has best rows to find


async def parts_add_up(db: Any) -> None:
    """Each bucket's parts of each kind hold its rows, no more and no fewer."""
    for col in rowcounts.SORTABLE:
        for b in await rowcounts.buckets(db, col, None):
            for kind in ("id", "fine"):
                parts = await rowcounts.parts(db, col, b.key, None, kind)
                assert not parts or sum(sum(per.values()) for _, per in parts) == b.n, (col, b.key, kind)


async def counts_of(db: Any) -> dict[str, Any]:
    out = {}
    for name in (rowcounts.COUNTS, rowcounts.TIES):
        async for doc in db[name].find({"n": {"$gt": 0}}, {"n": 1}):
            out[f"{name}/{doc['_id']}"] = doc["n"]
    return out


def test_pages_from_perfdb_match_a_brute_force_sort_through_writes_deletes_and_a_repair(mongo_service: Any) -> None:
    async def run() -> None:
        client: AsyncMongoClient = AsyncMongoClient(mongo_service.url)
        db = client[f"paging_{uuid.uuid4().hex[:10]}"]
        try:
            await store.ensure_indexes(db)
            rows = make_rows(400)
            for row in rows:
                await store.write_row(db, row)
            await check_pages(db, rows)
            # Walked, not read narrow, whatever the filters select; read by parts wherever a bucket has 8 rows or more
            # (by finer value for numbers, by id for ties).
            saved = boardwalk.PART_READ, leaderboard.NARROW
            boardwalk.PART_READ, leaderboard.NARROW = 8, 10
            try:
                await store.restamp(db)  # (else the pages come from the cache)
                await check_pages(db, rows)
            finally:
                boardwalk.PART_READ, leaderboard.NARROW = saved
            # Filtered totals counted only as far as the rows read are lower bounds, and say so; the pages stay exact.
            first, boardwalk.FIRST_READ = boardwalk.FIRST_READ, 1
            try:
                await store.restamp(db)
                await check_pages(db, rows)
                page = await leaderboard.page(db, sort="p99", order="asc", filters=["model!=m1"], limit=10, offset=0)
                assert not page.total_exact and 10 <= page.total < len(expected(rows, "p99_ms", "asc", ["model!=m1"], None))
            finally:
                boardwalk.FIRST_READ = first

            # A page is served again from the cache while the rows' stamp holds; a write, or no stamp, reads afresh.
            args = {"sort": "p99", "order": "asc", "filters": ["valid:true"], "limit": 5, "offset": 0}
            cached = await leaderboard.page(db, **args)
            assert await leaderboard.page(db, **args) is cached
            top = next(r for r in rows if r["_id"] == cached.rows[0].id)
            top["p99_ms"] = 1e6
            await store.write_row(db, top)
            fresh = await leaderboard.page(db, **args)
            assert fresh is not cached and top["_id"] not in [r.id for r in fresh.rows]
            assert [r.id for r in fresh.rows] == expected(rows, "p99_ms", "asc", ["valid:true"], None)[:5]
            await db[store.STAMPS].delete_many({})
            assert await leaderboard.page(db, **args) is not await leaderboard.page(db, **args)
            await store.restamp(db)

            # Rewrites (a new attempt's figures) and deletions keep the counts and the best right.
            rng = random.Random(5)
            for row in rng.sample(rows, 40):
                row.update(p99_ms=rng.uniform(0.01, 50), valid=True, backend="triton")
                await store.write_row(db, row)
            gone = [r["_id"] for r in rows[:30]]
            await store.delete_rows(db, row_ids=gone)
            rows = rows[30:]
            await check_pages(db, rows)
            kept = await counts_of(db)
            await parts_add_up(db)
            assert await store.recount(db) == len(rows)
            assert await counts_of(db) == kept  # counted row by row == counted from scratch

            # A row left pending (a leader stopped between the row and its counts) is recounted at start.
            stray = {**rows[0], "p99_ms": 0.001}
            await db[store.COLLECTION].replace_one({"_id": stray["_id"]}, {**stray, store.PENDING: True})
            rows[0] = stray
            assert await store.repair(db) is True
            assert await store.repair(db) is False
            await check_pages(db, rows)
        finally:
            await client.drop_database(db.name)
            await client.close()

    asyncio.run(run())


def test_bad_queries_name_the_field(mongo_service: Any) -> None:
    for text in ("nope:1", "p99<abc", "backend<3", "garbage"):
        with pytest.raises(InvalidRequest) as info:
            boardquery.parse_filter(text)
        assert info.value.field == "filter"

    async def run() -> None:
        client: AsyncMongoClient = AsyncMongoClient(mongo_service.url)
        db = client[f"paging_{uuid.uuid4().hex[:10]}"]
        try:
            await store.ensure_indexes(db)
            for row in make_rows(16):
                await store.write_row(db, row)
            for kwargs, field in (
                ({"sort": "index"}, "sort"),  # the whole board does not sort by it
                ({"offset": 9990, "limit": 50}, "offset"),
                ({"order": "up"}, "order"),
                ({"limit": 0}, "limit"),
            ):
                args = {"sort": "p99_ms", "order": "asc", "filters": [], "limit": 10, "offset": 0, **kwargs}
                with pytest.raises(InvalidRequest) as info:
                    await leaderboard.page(db, **args)
                assert info.value.field == field
        finally:
            await client.drop_database(db.name)
            await client.close()

    asyncio.run(run())
