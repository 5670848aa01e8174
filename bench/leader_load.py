"""The leader under load: N submissions from C concurrent clients (none lost or duplicated, counted in PerfDB) while
F simulated followers heartbeat over real HTTP; then, with those N jobs stored, R concurrent readers of the jobs
list, the leaderboard and the console's pages for S seconds while the followers beat and a client submits once a
second. The followers take what they are sent off their Celery queues and hold it, as agents do (each holds as many
as placement gives it), and one runs a job throughout: a fleet at work, with more queued than it can take. Prints the
latency percentiles measured in this run, each reader figure also as a ratio to the same read by one reader on the
idle leader (measured first, in this run), and the answers' status codes.

The followers (and the trickle of submissions), the storm's submitters and the readers each run in a process of their
own, as they would on their own machines: in one process, the 200 readers' own event loop (about half a core of
httpx) delayed every heartbeat and submission the bench timed, and a submission the leader answered in 0.5 s was
timed at 5 s.

Starts its own Redis, SecantusDB (on-disk storage) and leader process on loopback.
Usage: .venv/bin/python bench/leader_load.py [--jobs 10000] [--clients 50] [--followers 50] [--readers 200]
       [--read-s 60]
The last line is `RESULT leader_load key=value ...`. (Named leader_load: a bench/leader.py would shadow the leader
package for scripts run from bench/, which puts bench/ first on sys.path.)
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import multiprocessing
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import httpx
import numpy as np
import pymongo
import redis.asyncio as aioredis

from benchfleet.generate.modelgen import mlp_onnx
from benchfleet.stack import LocalStack
from common import __version__
from common.wire.followers import FollowerInfo, Heartbeat, HeartbeatReply, HeldJob
from common.wire.jobs import Claim
from common.wire.messaging import queue_for

T = TypeVar("T")

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


async def take_sent(broker: aioredis.Redis, fid: str) -> list[HeldJob]:
    """The run-job messages waiting on the follower's Celery queue (and its priority sub-queues), taken off it as its
    agent takes them: each attempt as the agent would hold it."""
    base = queue_for(fid)
    taken = []
    for key in await broker.keys(f"{base}*"):
        # kombu names priority sub-queues `<queue>\x06\x16<priority>`; nothing else may share the prefix.
        if key.decode() != base and not key.decode().startswith(base + "\x06\x16"):
            continue
        while (raw := await broker.rpop(key)) is not None:
            task = json.loads(base64.b64decode(json.loads(raw)["body"]))[0][0]  # (args, kwargs, embed): args[0]
            taken.append(HeldJob(job_id=task["job_id"], attempt=task["attempt"], estimate_s=task["estimate_s"]))
    return taken


async def heartbeater(
    url: str, join_token: str, broker_url: str, fid: str, stop: asyncio.Event, lat: list[float], errors: list[str], *, runs: bool
) -> None:
    """Register with the join token, then beat every interval with the own credential until stopped, holding what the
    leader sends (taken off its queue, as an agent does; dropped when the leader withdraws it) and, with `runs`, running
    the first job it is sent for the rest of the bench (claimed, as an agent claims the job it starts)."""
    incarnation = uuid.uuid4().hex
    facts = {"host": fid, "cpu_model": "bench", "cpu_count": 8, "memory_mb": 16384, "gpus": [], "backends": ["onnxruntime"]}
    info = FollowerInfo.model_validate({"follower_id": fid, "incarnation": incarnation, "version": __version__, **facts})
    held: dict[str, HeldJob] = {}
    broker = aioredis.Redis.from_url(broker_url)
    async with httpx.AsyncClient(base_url=url, timeout=30) as http, contextlib.aclosing(broker):
        reply = await http.post(
            "/api/v1/followers/register",
            content=info.model_dump_json(),
            headers={"Authorization": f"Bearer {join_token}", "Content-Type": "application/json"},
        )
        reply.raise_for_status()
        headers = {"Authorization": f"Bearer {reply.json()['credential']}", "Content-Type": "application/json"}
        while not stop.is_set():
            for job in await take_sent(broker, fid):
                held[job.job_id] = job
                if runs and not any(h.running for h in held.values()):
                    claim = Claim(attempt=job.attempt, follower_id=fid, incarnation=incarnation).model_dump_json()
                    claimed = await http.post(f"/api/v1/jobs/{job.job_id}/claim", content=claim, headers=headers)
                    held[job.job_id] = job.model_copy(update={"running": claimed.status_code == 200})
                    errors.extend([f"claim {claimed.status_code}"] if claimed.status_code != 200 else [])
            running = next((h.job_id for h in held.values() if h.running), None)
            state = "busy" if running else "ready"
            beat = Heartbeat(incarnation=incarnation, state=state, running_job=running, held=list(held.values()))
            started = time.perf_counter()
            try:
                response = await http.post(f"/api/v1/followers/{fid}/heartbeat", content=beat.model_dump_json(), headers=headers)
            except httpx.TransportError as exc:  # no answer within the timeout: a beat lost, as a follower's would be
                errors.append(f"heartbeat: {type(exc).__name__}")
                response = None
            lat.append(time.perf_counter() - started)
            if response is not None and response.status_code != 200:
                errors.append(f"heartbeat {response.status_code}")
            elif response is not None:  # what the leader withdrew is dropped, as an agent drops it
                for job_id in HeartbeatReply.model_validate_json(response.content).cancel:
                    held.pop(job_id, None)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), HEARTBEAT_EVERY_S)


async def submitter(url: str, token: str, names: list[str], lat: list[float], errors: list[str]) -> list[str]:
    """Submit each named job once (a client that got no answer would not know; here every answer is checked)."""
    ids = []
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/yaml"}
    async with httpx.AsyncClient(base_url=url, timeout=60) as http:
        for name in names:
            started = time.perf_counter()
            try:
                response = await http.post("/api/v1/jobs", content=JOB_YAML.format(name=name), headers=headers)
            except httpx.TransportError as exc:
                lat.append(time.perf_counter() - started)
                errors.append(f"submit: {type(exc).__name__}")
                continue
            lat.append(time.perf_counter() - started)
            if response.status_code != 201:
                errors.append(f"submit {response.status_code}: {response.text[:200]}")
            else:
                ids.append(response.json()["id"])
    return ids


# What a reader reads, in turn: the jobs list and the leaderboard (API), and the console's pages of both.
READS = ("/api/v1/jobs", "/api/v1/leaderboard", "/jobs", "/leaderboard")


@dataclass
class Reads:
    """One read phase: each read's latency by path, the answers' status codes, and the submissions and heartbeats
    made meanwhile."""

    readers: int
    seconds: float
    lat: dict[str, list[float]] = field(default_factory=lambda: {path: [] for path in READS})
    answered: dict[str, list[float]] = field(default_factory=lambda: {path: [] for path in READS})  # 200s only
    statuses: Counter[int] = field(default_factory=Counter)
    submit_lat: list[float] = field(default_factory=list)
    beat_lat: list[float] = field(default_factory=list)


async def reader(url: str, cookies: dict[str, str], token: str, until: float, out: Reads, k: int) -> None:
    """Read the API with a viewer token and the pages with its login's cookie, one after another, until `until`."""
    async with httpx.AsyncClient(base_url=url, timeout=60) as http:
        i = k  # readers start at different reads
        while time.monotonic() < until:
            path = READS[i % len(READS)]
            i += 1
            started = time.perf_counter()
            try:
                if path.startswith("/api/"):
                    response = await http.get(path, headers={"Authorization": f"Bearer {token}"})
                else:
                    response = await http.get(path, cookies=cookies)
            except httpx.TransportError:  # no answer within 60 s: counted as status 0
                out.lat[path].append(time.perf_counter() - started)
                out.statuses[0] += 1
                continue
            out.lat[path].append(time.perf_counter() - started)
            out.statuses[response.status_code] += 1
            if response.status_code == 200:
                out.answered[path].append(out.lat[path][-1])
            if response.status_code == 429:  # refused for the load: wait as told
                await asyncio.sleep(float(response.headers.get("Retry-After", "1")))


def _readers(url: str, viewers: list[tuple[str, dict[str, str]]], readers: int, seconds: float) -> Reads:
    """(In a process of its own) `readers` concurrent readers, each a user of its own, for `seconds`."""
    out = Reads(readers, seconds)
    until = time.monotonic() + seconds

    async def read() -> None:
        await asyncio.gather(*(reader(url, viewers[k][1], viewers[k][0], until, out, k) for k in range(readers)))

    asyncio.run(read())
    return out


def _storm(url: str, token: str, names: list[str], clients: int) -> tuple[list[str], list[float], list[str], float]:
    """(In a process of its own) each named job submitted once by `clients` concurrent clients: the ids answered,
    the latencies, the errors and the seconds it took."""
    lat: list[float] = []
    errors: list[str] = []

    async def submit() -> list[list[str]]:
        return await asyncio.gather(*(submitter(url, token, names[c::clients], lat, errors) for c in range(clients)))

    started = time.perf_counter()
    results = asyncio.run(submit())
    return [i for r in results for i in r], lat, errors, time.perf_counter() - started


async def _elsewhere(
    pool: ProcessPoolExecutor, work: Callable[[], Awaitable[None]] | None, fn: Callable[..., T], *args: object
) -> T:
    """`fn(*args)` run in the pool's process while this process's loop goes on beating (and runs `work`, if given)."""
    done = asyncio.get_running_loop().run_in_executor(pool, fn, *args)
    if work is not None:
        await work()
    return await done


async def read_phase(
    pool: ProcessPoolExecutor,
    url: str,
    admin: str,
    viewers: list[tuple[str, dict[str, str]]],
    readers: int,
    seconds: float,
    beat_lat: list[float],
    errors: list[str],
) -> Reads:
    """`readers` concurrent readers (each a user of its own: a viewer token and its login; in their own process) for
    `seconds`, while one client here submits a job a second."""
    submit_lat: list[float] = []
    beats_before = len(beat_lat)
    until = time.monotonic() + seconds

    async def trickle() -> None:
        while time.monotonic() < until:
            await submitter(url, admin, [f"trickle-{uuid.uuid4().hex[:8]}"], submit_lat, errors)
            await asyncio.sleep(max(0.0, 1.0 - (submit_lat[-1] if submit_lat else 0.0)))

    out = await _elsewhere(pool, trickle, _readers, url, viewers, readers, seconds)
    out.submit_lat = submit_lat
    out.beat_lat = beat_lat[beats_before:]
    return out


async def viewer_login(url: str, admin: str, k: int) -> tuple[str, dict[str, str]]:
    """Viewer k's token and its web login's session cookie (what an open console sends)."""
    async with httpx.AsyncClient(base_url=url, timeout=30) as http:
        made = await http.post(
            "/api/v1/tokens", json={"user": f"reader-{k}", "role": "viewer"}, headers={"Authorization": f"Bearer {admin}"}
        )
        made.raise_for_status()
        token = made.json()["token"]
        login = await http.post("/login", data={"token": token, "next": "/jobs"})
        if login.status_code not in (200, 303):
            raise RuntimeError(f"login: HTTP {login.status_code}: {login.text[:200]}")
        return token, dict(login.cookies)


async def run(
    url: str, env: dict[str, str], jobs: int, clients: int, followers: int, readers: int, read_s: float
) -> dict[str, object]:
    admin = env["BENCHFLEET_LEADER_ADMIN_TOKEN"]
    join, broker = env["BENCHFLEET_LEADER_FOLLOWER_TOKEN"], env["BENCHFLEET_REDIS_URL"]
    stop = asyncio.Event()
    beat_lat: list[float] = []
    sub_lat: list[float] = []
    errors: list[str] = []
    beaters = [
        asyncio.create_task(
            heartbeater(url, join, broker, f"bench-{i:02d}", stop, beat_lat, errors, runs=i == 0)  # one job runs throughout
        )
        for i in range(followers)
    ]
    # Let every follower register and beat once before the submissions start (all followers on line).
    while len(beat_lat) < followers and not any(t.done() for t in beaters):
        await asyncio.sleep(0.05)
    idle_beats = len(beat_lat)
    names = [f"bench-{uuid.uuid4().hex[:8]}-{i:04d}" for i in range(jobs)]
    phases: list[Reads] = []
    with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")) as pool:
        ids, storm_lat, storm_errors, elapsed = await _elsewhere(pool, None, _storm, url, admin, names, clients)
        sub_lat.extend(storm_lat)
        errors.extend(storm_errors)
        under_load = beat_lat[idle_beats:]
        if readers:
            viewers = [await viewer_login(url, admin, k) for k in range(max(readers, 10))]  # a user per reader
            # The reference: one reader on the leader with the jobs stored; then ten; then the room.
            for count, seconds in ((1, min(10.0, read_s)), (10, min(20.0, read_s)), (readers, read_s)):
                phases.append(await read_phase(pool, url, admin, viewers, count, seconds, beat_lat, errors))
                print(f"read phase: {count} readers for {seconds:g} s done: {dict(phases[-1].statuses)}", flush=True)
    stop.set()
    await asyncio.gather(*beaters)
    return {
        "ids": ids,
        "names": names,
        "sub_lat": sub_lat,
        "beat_lat": under_load,
        "errors": errors,
        "elapsed": elapsed,
        "phases": phases,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--followers", type=int, default=50)
    parser.add_argument("--readers", type=int, default=200, help="concurrent readers in the last read phase (0: none)")
    parser.add_argument("--read-s", type=float, default=60.0, help="seconds of that phase")
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
            out = asyncio.run(run(url, env, args.jobs, args.clients, args.followers, args.readers, args.read_s))
            with pymongo.MongoClient(mongo_uri) as mongo:
                fields = {"name": 1, "state": 1, "attempt": 1, "history.reason": 1}
                docs = list(mongo["bench"]["jobs"].find({"name": {"$regex": "^bench-"}}, fields))
                states = [d.get("state") for d in mongo["bench"]["followers"].find({}, {"state": 1})]
            leader_log = (Path(tmp) / "leader.log").read_text(errors="replace")
            rss_mb = _rss_mb(stack.leader.pid)
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
    marked = leader_log.count("): missing")  # the monitor's "follower F not heard for Xs (allowed Ys): missing"
    lagged = leader_log.count("liveness tick late")  # ticks the monitor found the leader itself lagging (not judged on)
    requeued = sum(any("missed heartbeats" in (h.get("reason") or "") for h in d.get("history", [])) for d in docs)
    # Any other requeue: the followers hold what they are sent, so none is lost on the way (nor given back).
    requeued_any = sum(int(d.get("attempt", 1)) > 1 for d in docs)
    running = sum(d.get("state") == "running" for d in docs)  # the job run throughout, still running
    print(
        f"followers marked missing (missing_after_s {args.missing_after_s:g}): {marked}; jobs requeued for missed "
        f"heartbeats: {requeued}, for any reason: {requeued_any}; late liveness ticks (leader lagged, timeout "
        f"extended): {lagged}; follower states at the end: {sorted(set(states))}; jobs running at the end: {running}"
    )
    leaked = env["BENCHFLEET_LEADER_ADMIN_TOKEN"] in leader_log or env["BENCHFLEET_LEADER_FOLLOWER_TOKEN"] in leader_log
    phases: list[Reads] = out["phases"]  # type: ignore[assignment]
    reads = read_figures(phases) if phases else ""
    print(
        "RESULT leader_load "
        f"jobs={args.jobs} clients={args.clients} followers={args.followers} stored={len(stored)} lost={lost} "
        f"duplicated={duplicated} errors={len(errors)} submit_per_s={args.jobs / out['elapsed']:.0f} "
        f"submit_p50_ms={np.percentile(sub, 50):.1f} submit_p99_ms={np.percentile(sub, 99):.1f} "
        f"heartbeat_p99_ms={np.percentile(beat, 99) if len(beat) else float('nan'):.1f} token_in_log={int(leaked)} "
        f"missing_after_s={args.missing_after_s:g} marked_missing={marked} requeued_missed={requeued} lagged_ticks={lagged}"
        f" requeued_any={requeued_any} running={running} leader_rss_mb={rss_mb:.0f}" + reads
    )


def _rss_mb(pid: int | None) -> float:
    """A process's resident memory now, in MB (/proc)."""
    if pid is None:
        return float("nan")
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmRSS:"))) / 1024


def _ms(values: list[float], q: float) -> float:
    return float(np.percentile(np.array(values) * 1000, q)) if values else float("nan")


def read_figures(phases: list[Reads]) -> str:
    """Print each read phase; the RESULT keys of the reference (1 reader), 10 readers and the room."""
    reference = phases[0]
    for phase in phases:
        rate = sum(phase.statuses.values()) / phase.seconds
        print(
            f"{phase.readers} readers for {phase.seconds:g} s: {rate:.0f} reads/s, answers {dict(sorted(phase.statuses.items()))}"
        )
        for path, lat in phase.lat.items():
            base = _ms(reference.lat[path], 50)
            print(
                f"  {path:22s} p50 {_ms(lat, 50):8.1f} ms ({_ms(lat, 50) / base:5.1f}x one reader's) p99 {_ms(lat, 99):8.1f} ms"
                f" ({len(lat)} reads); answered (200) p50 {_ms(phase.answered[path], 50):8.1f} ms"
                f" ({len(phase.answered[path])})"
            )
        print(
            f"  meanwhile: submissions p99 {_ms(phase.submit_lat, 99):.1f} ms ({len(phase.submit_lat)}), heartbeats p99"
            f" {_ms(phase.beat_lat, 99):.1f} ms ({len(phase.beat_lat)})"
        )
    ten, room = phases[1], phases[-1]
    jobs = "/api/v1/jobs"
    return (
        f" readers={room.readers} read_s={room.seconds:g} jobs_list_p50_ms_1={_ms(reference.lat[jobs], 50):.1f}"
        f" jobs_list_p50_ms_10={_ms(ten.lat[jobs], 50):.1f} jobs_list_answered_p50_ms_10={_ms(ten.answered[jobs], 50):.1f}"
        f" ten_200={ten.statuses[200]} ten_429={ten.statuses[429]} jobs_list_p50_ms_room={_ms(room.lat[jobs], 50):.1f}"
        f" jobs_list_room_vs_1={_ms(room.lat[jobs], 50) / _ms(reference.lat[jobs], 50):.1f}"
        f" room_reads_per_s={sum(room.statuses.values()) / room.seconds:.0f} room_200={room.statuses[200]}"
        f" room_429={room.statuses[429]} room_503={room.statuses[503]} room_unanswered_60s={room.statuses[0]}"
        f" room_other={sum(v for k, v in room.statuses.items() if k not in (0, 200, 429, 503))}"
        f" room_submit_p99_ms={_ms(room.submit_lat, 99):.1f} room_heartbeat_p99_ms={_ms(room.beat_lat, 99):.1f}"
    )


if __name__ == "__main__":
    main()
