"""Leaderboard latency with 100,000 stored points: the leader's HTTP answer vs sorting in PerfDB itself.

Starts SecantusDB and redis-server as processes, seeds `leaderboard` rows in batches, serves the real leader
app with uvicorn on loopback and times GET /api/v1/leaderboard over HTTP (sort, filter, page). For comparison it
times the same sort + count done by PerfDB (indexed find().sort().limit() and count_documents).
Prints figures and ends with `RESULT leaderboard ...`. Usage: python bench/leaderboard.py [--points N]
"""

from __future__ import annotations

import argparse
import random
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import uvicorn
from pymongo import ASCENDING, MongoClient

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchfleet.stack import LocalStack  # noqa: E402
from common.procs import free_port  # noqa: E402
from leader.app import create_app  # noqa: E402
from leader.settings import LeaderSettings  # noqa: E402
from leader.store.leaderboard import COLLECTION, row_from_result  # noqa: E402
from tests.conftest import wait_for_port  # noqa: E402

TOKEN = "bench-admin-token-000001"
BACKENDS = ["onnxruntime", "triton", "torchscript", "tfserving"]
HARDWARE = ["NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-40GB", "NVIDIA L4", "Intel Xeon"]
QUERIES = [
    {"sort": "p99", "order": "asc", "limit": 50},
    {"sort": "throughput", "order": "desc", "limit": 50},
    {"sort": "p99", "order": "asc", "filter": "backend:triton", "limit": 50},
    {"sort": "cost", "order": "asc", "filter": ["p99<20", "valid:true"], "limit": 50, "offset": 100},
    {"sort": "model", "order": "desc", "filter": "batch>=8", "limit": 100},
]


def synthetic_rows(n: int, seed: int = 0) -> list[dict]:
    """n leaderboard rows shaped by row_from_result from point-result-like documents."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        job = f"{i // 64:032x}"
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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--points", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=10)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-leaderboard-"))
    lport = free_port()
    services = LocalStack(work / "services")
    server = None
    thread: threading.Thread | None = None
    try:
        redis_url, uri = services.start_redis(), services.start_mongo()
        client: MongoClient = MongoClient(uri)
        col = client.bench[COLLECTION]
        col.create_index([("updated_ns", ASCENDING)])
        col.create_index([("p99_ms", ASCENDING)])  # for the PerfDB-side comparison
        # The leader starts first so its indexes exist while rows arrive (as in service); building them afterwards
        # over 100k rows is where SecantusDB dropped the connection.
        settings = LeaderSettings(
            mongo_uri=uri,
            redis_url=redis_url,
            db_name="bench",
            admin_token=TOKEN,
            follower_token=TOKEN + "f",
            port=lport,
        )
        server = uvicorn.Server(uvicorn.Config(create_app(settings), host="127.0.0.1", port=lport, log_level="warning"))
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        wait_for_port(lport)
        t0 = time.perf_counter()
        rows = synthetic_rows(args.points)
        for start in range(0, len(rows), 5000):
            col.insert_many(rows[start : start + 5000], ordered=False)
        seed_s = time.perf_counter() - t0
        print(f"seeded {args.points} rows in {seed_s:.1f} s", flush=True)

        http = httpx.Client(base_url=f"http://127.0.0.1:{lport}", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=120)
        t0 = time.perf_counter()
        first = http.get("/api/v1/leaderboard", params=QUERIES[0])
        cold_s = time.perf_counter() - t0
        assert first.status_code == 200 and first.json()["total"] == args.points, first.text[:200]
        print(f"first answer (loads every row into the leader's index): {cold_s:.2f} s", flush=True)
        times: list[float] = []
        for _ in range(args.repeats):
            for q in QUERIES:
                t0 = time.perf_counter()
                r = http.get("/api/v1/leaderboard", params=q)
                times.append((time.perf_counter() - t0) * 1000)
                assert r.status_code == 200 and r.json()["rows"], r.text[:200]
        times.sort()
        p50, p95, worst = statistics.median(times), times[int(0.95 * (len(times) - 1))], times[-1]
        print(f"leader HTTP answers over {len(times)} queries: p50 {p50:.1f} ms, p95 {p95:.1f} ms, max {worst:.1f} ms")
        # PerfDB doing the same work: an indexed sort + limit and a count (what a leader without the index would do).
        mongo_ms = []
        for _ in range(2):
            t0 = time.perf_counter()
            list(col.find({}).sort("p99_ms", 1).limit(50))
            col.count_documents({})
            mongo_ms.append((time.perf_counter() - t0) * 1000)
        perfdb_ms = min(mongo_ms)
        print(f"PerfDB (SecantusDB) sort p99 + count: {perfdb_ms:.0f} ms (it does not use the index for the sort)")
        print(
            f"RESULT leaderboard points={args.points} http_p50_ms={p50:.1f} http_p95_ms={p95:.1f} http_max_ms={worst:.1f} "
            f"cold_load_s={cold_s:.2f} perfdb_sort_count_ms={perfdb_ms:.0f} speedup_vs_perfdb={perfdb_ms / p50:.0f}x "
            f"under_300ms={p95 < 300}"
        )
    finally:
        if server is not None:
            server.should_exit = True
            if thread is not None:
                thread.join(timeout=15)  # the leader stops before its database does
        services.close()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
