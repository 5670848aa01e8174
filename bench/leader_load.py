"""The leader under load: N submissions from C concurrent clients (none lost or duplicated, counted in PerfDB) while
F simulated followers heartbeat over real HTTP; prints the API latency percentiles measured in this run.

Starts its own Redis, SecantusDB (on-disk storage) and leader process on loopback.
Usage: .venv/bin/python bench/leader_load.py [--jobs 1000] [--clients 50] [--followers 50]
The last line is `RESULT leader key=value ...`. (Named leader_load: a bench/leader.py would shadow the leader
package for scripts run from bench/, which puts bench/ first on sys.path.)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import tempfile
import time
import uuid
from pathlib import Path

import httpx
import numpy as np
import pymongo

from benchfleet.generate.modelgen import mlp_onnx
from benchfleet.stack import LocalStack
from common import __version__
from common.wire.followers import FollowerInfo, Heartbeat

HEARTBEAT_EVERY_S = 0.5  # the tests' interval: 4x the production default rate per follower

JOB_YAML = """
name: {name}
model: {{ref: mlp-bench:1}}
backends: [onnxruntime]
batch_sizes: [1]
load: {{pattern: constant, rate: 20, duration: 1s, warmup: 0s, allow_short: true}}
"""


def start_services(workdir: Path, missing_after_s: float = 10.0) -> LocalStack:
    """Redis, SecantusDB and a leader (benchfleet.stack), the leader's database named `bench`."""
    stack = LocalStack(
        workdir,
        db_name="bench",
        base_env={"PATH": "/usr/bin:/bin"},
        env={"BENCHFLEET_LEADER_MISSING_AFTER_S": str(missing_after_s)},
    )
    stack.start_redis()
    stack.start_mongo()
    stack.start_leader()
    return stack


async def heartbeater(url: str, join_token: str, fid: str, stop: asyncio.Event, lat: list[float], errors: list[str]) -> None:
    """Register with the join token, then beat every interval with the own credential until stopped."""
    incarnation = uuid.uuid4().hex
    info = FollowerInfo(
        follower_id=fid,
        incarnation=incarnation,
        host=fid,
        cpu_model="bench",
        cpu_count=8,
        memory_mb=16384,
        gpus=[],
        backends=["onnxruntime"],
        version=__version__,
    )
    async with httpx.AsyncClient(base_url=url, timeout=30) as http:
        reply = await http.post(
            "/api/v1/followers/register",
            content=info.model_dump_json(),
            headers={"Authorization": f"Bearer {join_token}", "Content-Type": "application/json"},
        )
        reply.raise_for_status()
        headers = {"Authorization": f"Bearer {reply.json()['credential']}", "Content-Type": "application/json"}
        body = Heartbeat(incarnation=incarnation, state="ready").model_dump_json()
        while not stop.is_set():
            started = time.perf_counter()
            response = await http.post(f"/api/v1/followers/{fid}/heartbeat", content=body, headers=headers)
            lat.append(time.perf_counter() - started)
            if response.status_code != 200:
                errors.append(f"heartbeat {response.status_code}")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), HEARTBEAT_EVERY_S)


async def submitter(url: str, token: str, names: list[str], lat: list[float], errors: list[str]) -> list[str]:
    """Submit each named job once (a client that got no answer would not know; here every answer is checked)."""
    ids = []
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/yaml"}
    async with httpx.AsyncClient(base_url=url, timeout=60) as http:
        for name in names:
            started = time.perf_counter()
            response = await http.post("/api/v1/jobs", content=JOB_YAML.format(name=name), headers=headers)
            lat.append(time.perf_counter() - started)
            if response.status_code != 201:
                errors.append(f"submit {response.status_code}: {response.text[:200]}")
            else:
                ids.append(response.json()["id"])
    return ids


async def run(url: str, env: dict[str, str], jobs: int, clients: int, followers: int) -> dict[str, object]:
    admin = env["BENCHFLEET_LEADER_ADMIN_TOKEN"]
    stop = asyncio.Event()
    beat_lat: list[float] = []
    sub_lat: list[float] = []
    errors: list[str] = []
    beaters = [
        asyncio.create_task(heartbeater(url, env["BENCHFLEET_LEADER_FOLLOWER_TOKEN"], f"bench-{i:02d}", stop, beat_lat, errors))
        for i in range(followers)
    ]
    # Let every follower register and beat once before the submissions start (all followers on line).
    while len(beat_lat) < followers and not any(t.done() for t in beaters):
        await asyncio.sleep(0.05)
    idle_beats = len(beat_lat)
    names = [f"bench-{uuid.uuid4().hex[:8]}-{i:04d}" for i in range(jobs)]
    started = time.perf_counter()
    results = await asyncio.gather(*(submitter(url, admin, names[c::clients], sub_lat, errors) for c in range(clients)))
    elapsed = time.perf_counter() - started
    under_load = beat_lat[idle_beats:]
    stop.set()
    await asyncio.gather(*beaters)
    ids = [i for r in results for i in r]
    return {"ids": ids, "names": names, "sub_lat": sub_lat, "beat_lat": under_load, "errors": errors, "elapsed": elapsed}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--followers", type=int, default=50)
    parser.add_argument(
        "--missing-after-s", type=float, default=10.0, help="the leader's heartbeat timeout (10 s is the production default)"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-leader-") as tmp:
        stack = start_services(Path(tmp), args.missing_after_s)
        env, url, mongo_uri = stack.env, stack.url, str(stack.mongo_uri)
        try:
            admin = {"Authorization": f"Bearer {env['BENCHFLEET_LEADER_ADMIN_TOKEN']}"}
            upload = httpx.post(
                f"{url}/api/v1/models",
                headers=admin,
                data={"name": "mlp-bench", "version": "1"},
                files={"file": ("m.onnx", mlp_onnx())},
                timeout=60,
            )
            upload.raise_for_status()
            out = asyncio.run(run(url, env, args.jobs, args.clients, args.followers))
            with pymongo.MongoClient(mongo_uri) as mongo:
                docs = list(mongo["bench"]["jobs"].find({"name": {"$regex": "^bench-"}}, {"name": 1, "history.reason": 1}))
                states = [d.get("state") for d in mongo["bench"]["followers"].find({}, {"state": 1})]
            leader_log = (Path(tmp) / "leader.log").read_text(errors="replace")
        finally:
            stack.close()
    stored = [d["name"] for d in docs]
    expected = set(out["names"])  # type: ignore[arg-type]
    lost = len(expected - set(stored))
    duplicated = len(stored) - len(set(stored))
    sub = np.array(out["sub_lat"]) * 1000
    beat = np.array(out["beat_lat"]) * 1000
    errors: list[str] = out["errors"]  # type: ignore[assignment]
    print(
        f"{args.jobs} submissions from {args.clients} clients in {out['elapsed']:.1f} s "
        f"({args.jobs / out['elapsed']:.0f}/s); {args.followers} followers beating every {HEARTBEAT_EVERY_S}s"
    )
    print(f"jobs in PerfDB: {len(stored)} (lost {lost}, duplicated {duplicated}); answered ids {len(out['ids'])}")
    print(f"submit latency ms: p50 {np.percentile(sub, 50):.1f} p99 {np.percentile(sub, 99):.1f} max {sub.max():.1f}")
    if len(beat):
        print(
            f"heartbeat latency under load ms ({len(beat)} beats): p50 {np.percentile(beat, 50):.1f} "
            f"p99 {np.percentile(beat, 99):.1f} max {beat.max():.1f}"
        )
    print(f"errors: {len(errors)} {errors[:3]}")
    # Liveness under the storm: every simulated follower beat every HEARTBEAT_EVERY_S throughout, so none should
    # have been judged missing, nor any job requeued for missed heartbeats.
    marked = leader_log.count("missed heartbeats for")
    lagged = leader_log.count("liveness tick late")  # ticks the monitor found the leader itself lagging (not judged on)
    requeued = sum(any("missed heartbeats" in (h.get("reason") or "") for h in d.get("history", [])) for d in docs)
    print(
        f"followers marked missing (missing_after_s {args.missing_after_s:g}): {marked}; jobs requeued for missed "
        f"heartbeats: {requeued}; late liveness ticks (leader lagged, timeout extended): {lagged}; "
        f"follower states at the end: {sorted(set(states))}"
    )
    leaked = env["BENCHFLEET_LEADER_ADMIN_TOKEN"] in leader_log or env["BENCHFLEET_LEADER_FOLLOWER_TOKEN"] in leader_log
    print(
        "RESULT leader "
        f"jobs={args.jobs} clients={args.clients} followers={args.followers} stored={len(stored)} lost={lost} "
        f"duplicated={duplicated} errors={len(errors)} submit_per_s={args.jobs / out['elapsed']:.0f} "
        f"submit_p50_ms={np.percentile(sub, 50):.1f} submit_p99_ms={np.percentile(sub, 99):.1f} "
        f"heartbeat_p99_ms={np.percentile(beat, 99) if len(beat) else float('nan'):.1f} token_in_log={int(leaked)} "
        f"missing_after_s={args.missing_after_s:g} marked_missing={marked} requeued_missed={requeued} lagged_ticks={lagged}"
    )


if __name__ == "__main__":
    main()
