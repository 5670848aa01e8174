"""The leaderboard paged from PerfDB: answer time and the leader's memory with 1,000 and with 100,000 stored rows, and
today's reference measured in the same run.

For each size: SecantusDB and Redis start as processes; the rows (shaped by row_from_result) are stored as an earlier
leader stored them, then counted by the leader's own recount (what migration 4 and a repair run); a real leader starts
as its own process (`python -m leader`) and answers GET /api/v1/leaderboard over HTTP for the queries below (sorts,
filters, pages deep into the board, a job's rows). Each query is asked right after the rows are restamped (what any
write does: no cached page is served, the page is read from PerfDB; `http_*`), then once more at once (the leader's
page cache; `cached_http_*`). Its resident memory is read from /proc after the queries.

The reference (`--reference REV`, by default the commit before the leaderboard left the leader's memory): that
revision's own bench/leaderboard.py run from a git worktree of it at `--reference-points` rows, in this same run; its
`RESULT` line gives the leader's answer time then (rows held in memory, synced from PerfDB before each answer).

Prints figures and ends with `RESULT leaderboard ...`. Usage: python bench/leaderboard.py [--sizes 1000,100000]
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from pymongo import AsyncMongoClient

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchfleet.stack import LocalStack  # noqa: E402
from leader.store import leaderboard as store  # noqa: E402
from leader.store.leaderboard import COLLECTION, row_from_result  # noqa: E402

REFERENCE = "3762f25"  # the last commit whose leader held every row in memory
BACKENDS = ["onnxruntime", "triton", "torchscript", "tfserving"]
HARDWARE = ["NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-40GB", "NVIDIA L4", "Intel Xeon"]
# The reference's queries (the same five), then pages deep into the board and a job's rows.
QUERIES: list[dict[str, Any]] = [
    {"sort": "p99", "order": "asc", "limit": 50},
    {"sort": "throughput", "order": "desc", "limit": 50},
    {"sort": "p99", "order": "asc", "filter": "backend:triton", "limit": 50},
    {"sort": "cost", "order": "asc", "filter": ["p99<20", "valid:true"], "limit": 50, "offset": 100},
    {"sort": "model", "order": "desc", "filter": "batch>=8", "limit": 100},
]


def extra(n: int) -> dict[str, dict[str, Any]]:
    """Pages deep into the board (up to the 10,000-row window), into a run of tied rows, and one job's rows."""
    return {
        "deep": {"sort": "p99", "order": "desc", "limit": 50, "offset": min(9000, n - 50)},
        "tied": {"sort": "rate", "order": "asc", "limit": 50, "offset": min(4000, n // 2)},  # 5 rates: read by parts
        "job": {"sort": "index", "order": "asc", "filter": f"job_id={job_id(0)}", "limit": 64},
    }


def job_id(k: int) -> str:
    """The k-th job's id: hex, spread like the leader's own (uuid4) ids."""
    return hashlib.md5(str(k).encode()).hexdigest()


def synthetic_rows(n: int, seed: int = 0) -> list[dict[str, Any]]:
    """n leaderboard rows shaped by row_from_result from point-result-like documents (64 points a job)."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        job = job_id(i // 64)
        p99 = rng.lognormvariate(2.3, 0.8)
        result = {
            "point": {
                "index": i % 64,
                "backend": rng.choice(BACKENDS),
                "batch_size": rng.choice([1, 2, 4, 8, 16, 32]),
                "pattern": "poisson",
                "rate": float(rng.choice([50, 100, 200, 400, 800])),
            },
            "environment": {"follower_id": f"f{i % 37}", "gpus": [rng.choice(HARDWARE)], "cpu_model": "x"},
            "achieved_rate": rng.uniform(40, 800),
            "latency_ms": {"p50": p99 / 3, "p99": p99},
            "service_ms": {"p99": p99 * 0.8},
            "requests": 5000,
            "errors": 0,
            "valid": rng.random() > 0.1,
            "slo_met": p99 < 20,
            "started_at": "2025-01-01T00:00:00+00:00",
            "resources": {"cost_per_1m_requests": rng.uniform(0.05, 3), "energy_per_request_j": rng.uniform(0.1, 2)},
        }
        rows.append(
            row_from_result(
                job_id=job, job_name=f"job{i // 64 % 50}", model=f"model{i % 7}:1", slo_p99_ms=20.0, attempt=1, result=result
            )
        )
    return rows


async def seed(uri: str, n: int) -> tuple[float, float]:
    """Store n rows as an earlier leader did, then count them (the leader's recount); seconds for each."""
    client: AsyncMongoClient = AsyncMongoClient(uri)
    try:
        db = client["bench"]
        await store.ensure_indexes(db)  # indexes first: built over 100k stored rows, SecantusDB dropped the connection
        rows = synthetic_rows(n)
        t0 = time.perf_counter()
        for start in range(0, n, 5000):
            await db[COLLECTION].insert_many(rows[start : start + 5000], ordered=False)
        stored_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        assert await store.recount(db) == n
        return stored_s, time.perf_counter() - t0
    finally:
        await client.close()


async def restamp(uri: str) -> None:
    """A new stamp on the rows, as a write leaves: the leader reads its next pages from PerfDB."""
    client: AsyncMongoClient = AsyncMongoClient(uri)
    try:
        await store.restamp(client["bench"])
    finally:
        await client.close()


def rss_mb(pid: int) -> tuple[float, float]:
    """(resident, peak resident) MiB of a process."""
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024


def measure(n: int, repeats: int, work: Path) -> dict[str, float]:
    """One size: seed, start the leader, time the queries, read its memory."""
    stack = LocalStack(work / f"rows-{n}", db_name="bench")
    try:
        stack.start_redis()
        uri = stack.start_mongo()
        stored_s, counted_s = asyncio.run(seed(uri, n))
        print(f"{n} rows: stored in {stored_s:.1f} s, counted in {counted_s:.1f} s", flush=True)
        leader = stack.start_leader()
        pid = leader.pid
        assert pid is not None
        rss_start, _ = rss_mb(pid)
        http = httpx.Client(base_url=stack.url, headers={"Authorization": f"Bearer {stack.admin_token}"}, timeout=120)
        t0 = time.perf_counter()
        first = http.get("/api/v1/leaderboard", params=QUERIES[0])
        first_s = time.perf_counter() - t0
        assert first.status_code == 200 and first.json()["total"] == n and first.json()["total_exact"], first.text[:300]
        times: list[float] = []  # the reference's queries, each read from PerfDB (the rows just restamped)
        cached: list[float] = []  # the same asked again at once: served from the leader's page cache
        more: dict[str, list[float]] = {}
        for _ in range(repeats):
            for name, q in [*((f"q{i}", q) for i, q in enumerate(QUERIES)), *extra(n).items()]:
                asyncio.run(restamp(uri))  # what every write does: no page cached before it is served
                for kind in ("read", "cached"):
                    t0 = time.perf_counter()
                    r = http.get("/api/v1/leaderboard", params=q)
                    ms = (time.perf_counter() - t0) * 1000
                    assert r.status_code == 200 and r.json()["rows"], (q, r.text[:300])
                    if kind == "read":
                        more.setdefault(name, []).append(ms)
                    if name.startswith("q"):
                        (times if kind == "read" else cached).append(ms)
        rss, peak = rss_mb(pid)
        times.sort()
        cached.sort()
        out = {
            "p50": statistics.median(times),
            "p95": times[int(0.95 * (len(times) - 1))],
            "cached_p50": statistics.median(cached),
            "cached_p95": cached[int(0.95 * (len(cached) - 1))],
            "first_s": first_s,
            "rss_start": rss_start,
            "rss": rss,
            "peak": peak,
            **{k: statistics.median(v) for k, v in more.items()},
        }
        print(
            f"{n} rows: first answer {first_s * 1000:.0f} ms; the reference's queries p50 {out['p50']:.1f} ms, p95 "
            f"{out['p95']:.1f} ms (asked again: p50 {out['cached_p50']:.1f} ms, p95 {out['cached_p95']:.1f} ms); "
            + ", ".join(f"{k} page {statistics.median(v):.1f} ms" for k, v in more.items()),
            flush=True,
        )
        print(f"{n} rows: leader resident {rss_start:.0f} MiB at start, {rss:.0f} MiB after the queries (peak {peak:.0f})")
        return out
    finally:
        stack.close()


def reference(rev: str, points: int, work: Path) -> dict[str, float]:
    """The reference revision's own bench at `points` rows, from a worktree of it: its RESULT figures."""
    tree = work / "reference"
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree), rev], check=True, capture_output=True)
    try:
        done = subprocess.run(
            [sys.executable, "bench/leaderboard.py", "--points", str(points)],
            cwd=tree,
            capture_output=True,
            text=True,
            timeout=1800,
        )
        line = next((x for x in done.stdout.splitlines() if x.startswith("RESULT leaderboard")), None)
        if line is None:
            raise RuntimeError(f"the reference bench printed no RESULT line:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
        print(f"reference {rev} at {points} rows: {line}", flush=True)
        return {k: float(v) for k, v in re.findall(r"(\w+)=([0-9.]+)(?:\s|$)", line)}
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], capture_output=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="1000,100000", help="row counts, comma-separated (the last is the headline)")
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--reference", default=REFERENCE, help="the revision measured as today's ('' for none)")
    parser.add_argument("--reference-points", type=int, default=1000)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-leaderboard-"))
    try:
        sizes = [int(s) for s in args.sizes.split(",")]
        ref = reference(args.reference, args.reference_points, work) if args.reference else {}
        got = {n: measure(n, args.repeats, work) for n in sizes}
        small, big = got[sizes[0]], got[sizes[-1]]
        cached_p50, cached_p95 = big["cached_p50"], big["cached_p95"]
        fields = [
            f"rows={sizes[-1]}",
            f"http_p50_ms={big['p50']:.1f}",
            f"http_p95_ms={big['p95']:.1f}",
            f"cached_http_p50_ms={big['cached_p50']:.1f}",
            f"cached_http_p95_ms={big['cached_p95']:.1f}",
            f"first_answer_ms={big['first_s'] * 1000:.0f}",
            f"deep_page_ms={big['deep']:.1f}",
            f"tied_page_ms={big['tied']:.1f}",
            f"job_rows_ms={big['job']:.1f}",
            f"small_rows={sizes[0]}",
            f"small_http_p50_ms={small['p50']:.1f}",
            f"p50_ratio_big_vs_small={big['p50'] / small['p50']:.2f}",
            f"leader_rss_mb_small={small['rss']:.0f}",
            f"leader_rss_mb_big={big['rss']:.0f}",
            f"leader_rss_growth_mb={big['rss'] - small['rss']:.0f}",
        ]
        if ref:
            fields += [
                f"reference={args.reference}",
                f"reference_rows={args.reference_points}",
                f"reference_http_p50_ms={ref['http_p50_ms']:.1f}",
                f"p50_ratio_vs_reference={big['p50'] / ref['http_p50_ms']:.2f}",
                f"reference_http_p95_ms={ref['http_p95_ms']:.1f}",
                f"faster_than_reference={big['p50'] < ref['http_p50_ms'] and big['p95'] < ref['http_p95_ms']}",
                f"cached_faster_than_reference={cached_p50 < ref['http_p50_ms'] and cached_p95 < ref['http_p95_ms']}",
            ]
        print("RESULT leaderboard " + " ".join(fields))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
