"""The two-tier scheduler measured: a discrete-event simulation of the InferBench experiment; a table of bounded
waits over job mixes (heavy-tailed, bimodal, uniform; 2 and 8 followers; loads 0.7 and 0.95; estimate errors 20% and
60%; Poisson and bursty arrivals); the placement decision's cost with 1,000 followers and 100,000 queued jobs (plus
what the Mongo round trips cost); and a live run on this machine with several follower processes and short real jobs.

Usage: .venv/bin/python -m bench.scheduler [--skip-live] [--skip-mongo] [--sim-jobs 2000] [--seeds 5]

Every figure is measured in this run; the last line is `RESULT scheduler key=value ...`.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import heapq
import math
import os
import random
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from benchfleet.stack import LocalStack
from follower.agent.holding import HeldEntry, HoldingQueue, work_ahead
from follower.settings import WAIT_BOUND
from leader.domain import Candidate, Gpu, Load, Needs, QueuedJob
from leader.placement.placer import PlacementIndex, Policy

CONFIGS: list[tuple[str, Policy, str]] = [
    ("rr_fcfs", "round_robin", "fcfs"),
    ("ll_sjf", "least_queue_length", "sjf"),
    ("qa_sjf", "queue_aware", "sjf"),
]


# --- 1. discrete-event simulation ---------------------------------------------------------------------------


@dataclass
class SimJob:
    id: int
    arrival: float
    size: float  # true run time, minutes
    estimate: float  # what the scheduler believes (spec estimate corrected by history: ~20% error)
    start: float = math.nan
    end: float = math.nan


MIXES = ("mixed", "heavy", "bimodal", "uniform")


def job_sizes(mix: str, n: int, rng: random.Random) -> list[float]:
    """Job run times in minutes. mixed: 60% 1-5 min, 30% 10-30, 10% 60-120 (the InferBench experiment); heavy: Pareto
    (shape 1.2) from 1 min, capped at 8 h; bimodal: 90% 1 min, 10% 60 min; uniform: 1-30 min."""
    if mix == "mixed":
        out = []
        for _ in range(n):
            u = rng.random()
            out.append(rng.uniform(1, 5) if u < 0.6 else rng.uniform(10, 30) if u < 0.9 else rng.uniform(60, 120))
        return out
    if mix == "heavy":
        return [min(480.0, rng.paretovariate(1.2)) for _ in range(n)]
    if mix == "bimodal":
        return [1.0 if rng.random() < 0.9 else 60.0 for _ in range(n)]
    if mix == "uniform":
        return [rng.uniform(1, 30) for _ in range(n)]
    raise ValueError(f"unknown mix {mix!r}")


def job_mix(n: int, followers: int, load: float, rng: random.Random, *, mix: str = "mixed", error: float = 0.2,
            bursty: bool = False) -> list[SimJob]:  # fmt: skip
    """A stream of benchmark jobs at the offered utilisation `load`: Poisson arrivals, or (`bursty`) bursts of 1-20
    jobs at once at the same mean rate; estimates off by a log-normal factor of spread `error` (0.2: ~20%)."""
    sizes = job_sizes(mix, n, rng)
    rate = load * followers / statistics.fmean(sizes)  # arrivals per minute at the offered utilisation
    t, jobs, burst = 0.0, [], 0
    for i, size in enumerate(sizes):
        if burst == 0:
            burst = rng.randint(1, 20) if bursty else 1
            t += rng.expovariate(rate / burst) if bursty else rng.expovariate(rate)
        burst -= 1
        jobs.append(SimJob(i, t, size, size * rng.lognormvariate(0.0, error)))
    return jobs


@dataclass
class SimFollower:
    fid: str
    held: list[HeldEntry] = field(default_factory=list)
    running: SimJob | None = None
    running_entry: HeldEntry | None = None


def simulate(jobs: list[SimJob], n_followers: int, policy: Policy, order: str, ageing_per_s: float,
             wait_bound: float = WAIT_BOUND) -> list[SimJob]:  # fmt: skip
    """Tier 1 at arrival with the leader's own PlacementIndex; tier 2 with the follower's own HoldingQueue ordering
    (its sort key and its `work_ahead`, the FCFS wait each job records at acceptance; minutes throughout)."""
    clock = [0.0]
    with tempfile.TemporaryDirectory() as tmp:
        # Only its ordering function is used (no files): the exact key the follower's run loop sorts by.
        ordering = HoldingQueue(Path(tmp), order=order, ageing_per_s=ageing_per_s / 60.0, wait_bound=wait_bound,  # type: ignore[arg-type]
                                clock=lambda: clock[0])  # fmt: skip
    followers = [SimFollower(f"f{i:02d}") for i in range(n_followers)]
    by_id = {f.fid: f for f in followers}
    candidates = [Candidate(f.fid, frozenset({"onnxruntime"})) for f in followers]
    sim = {j.id: j for j in jobs}
    done: list[tuple[float, int, str]] = []  # completion events (time, job, follower)
    rr_last: str | None = None

    def start_next(f: SimFollower, now: float) -> None:
        clock[0] = now
        if f.running is None and f.held:
            best = min(f.held, key=lambda e: ordering.priority(e, now))
            f.held.remove(best)
            best.running, best.started_at = True, now
            job = sim[int(best.job_id)]
            job.start, f.running, f.running_entry = now, job, best
            heapq.heappush(done, (now + job.size, job.id, f.fid))

    for job in jobs:
        while done and done[0][0] <= job.arrival:
            t, jid, fid = heapq.heappop(done)
            sim[jid].end = t
            by_id[fid].running = by_id[fid].running_entry = None
            start_next(by_id[fid], t)
        # The leader's load: the summed estimates of each follower's assigned and running jobs, and their count.
        loads = {
            f.fid: Load(
                sum(e.estimate_s for e in f.held) + (f.running.estimate if f.running else 0.0),
                len(f.held) + (f.running is not None),
            )
            for f in followers
        }
        index = PlacementIndex(candidates, loads, policy=policy, rr_last=rr_last)
        fid = index.choose(QueuedJob(str(job.id), 1, frozenset({"onnxruntime"}), job.estimate))
        assert fid is not None
        rr_last = fid
        target = by_id[fid]
        ahead = work_ahead([*target.held, *([target.running_entry] if target.running_entry else [])], job.arrival)
        target.held.append(HeldEntry(str(job.id), 1, job.estimate, job.arrival, job.id, {}, Path(), ahead_s=ahead))
        start_next(by_id[fid], job.arrival)
    while done:
        t, jid, fid = heapq.heappop(done)
        sim[jid].end = t
        by_id[fid].running = by_id[fid].running_entry = None
        start_next(by_id[fid], t)
    return jobs


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(math.ceil(q * len(ordered))) - 1)]


def run_simulation(n_jobs: int, seeds: int, followers: int, load: float, ageing: float,
                   wait_bound: float = WAIT_BOUND) -> dict[str, dict[str, float]]:  # fmt: skip
    """Mean JCT, p95 JCT and the longest wait per configuration, averaged over seeds (the same job streams for all)."""
    out: dict[str, dict[str, float]] = {}
    for name, policy, order in CONFIGS:
        means, p95s, waits = [], [], []
        for seed in range(seeds):
            jobs = simulate(job_mix(n_jobs, followers, load, random.Random(seed)), followers, policy, order, ageing, wait_bound)
            jct = [j.end - j.arrival for j in jobs]
            means.append(statistics.fmean(jct))
            p95s.append(pct(jct, 0.95))
            waits.append(max(j.start - j.arrival for j in jobs))
        out[name] = {"mean": statistics.fmean(means), "p95": statistics.fmean(p95s), "max_wait": max(waits)}
    return out


@dataclass(frozen=True)
class Cell:
    mix: str
    followers: int
    load: float
    error: float
    bursty: bool

    @property
    def label(self) -> str:
        arrivals = "bursty " if self.bursty else "poisson"
        return f"{self.mix:8s} {self.followers:2d}f load {self.load:.2f} err {self.error:.0%} {arrivals}"


def wait_table(n_jobs: int, seeds: int, ageing: float, wait_bound: float) -> list[tuple[Cell, dict[str, float]]]:
    """Over every mix: mean JCT and longest wait of QA+SJF (with the wait bound) against RR+FCFS on the same streams."""
    rows = []
    for mix in ("heavy", "bimodal", "uniform", "mixed"):
        for followers in (2, 8):
            for load in (0.7, 0.95):
                for error in (0.2, 0.6):
                    for bursty in (False, True):
                        cell = Cell(mix, followers, load, error, bursty)
                        means: dict[str, list[float]] = {"rr": [], "qa": [], "qa_nobound": []}
                        waits: dict[str, list[float]] = {"rr": [], "qa": [], "qa_nobound": []}
                        for seed in range(seeds):
                            for key, policy, order, bound in (("rr", "round_robin", "fcfs", 0.0),
                                                              ("qa", "queue_aware", "sjf", wait_bound),
                                                              ("qa_nobound", "queue_aware", "sjf", 0.0)):  # fmt: skip
                                stream = job_mix(n_jobs, followers, load, random.Random(seed), mix=mix, error=error,
                                                 bursty=bursty)  # fmt: skip
                                done = simulate(stream, followers, policy, order, ageing, bound)  # type: ignore[arg-type]
                                means[key].append(statistics.fmean(j.end - j.arrival for j in done))
                                waits[key].append(max(j.start - j.arrival for j in done))
                        rr_mean, rr_wait = statistics.fmean(means["rr"]), statistics.fmean(waits["rr"])
                        rows.append((cell, {
                            "mean_win": rr_mean / statistics.fmean(means["qa"]),
                            "wait_ratio": statistics.fmean(waits["qa"]) / rr_wait,
                            "worst_wait_ratio": max(q / r for q, r in zip(waits["qa"], waits["rr"], strict=True)),
                            "nobound_mean_win": rr_mean / statistics.fmean(means["qa_nobound"]),
                            "nobound_wait_ratio": statistics.fmean(waits["qa_nobound"]) / rr_wait,
                        }))  # fmt: skip
    return rows


# --- 2. placement decision cost ------------------------------------------------------------------------------


def decision_cost(n_followers: int, n_queued: int, decisions: int) -> dict[str, float]:
    """Time PlacementIndex on 1,000 followers (4 hardware classes) whose queues hold 100,000 jobs between them."""
    rng = random.Random(1)
    classes = [
        (frozenset({"onnxruntime"}), ()),
        (frozenset({"onnxruntime", "torchscript"}), ()),
        (frozenset({"onnxruntime", "triton"}), (Gpu("NVIDIA A100-SXM4-40GB", 40960),)),
        (frozenset({"onnxruntime", "triton"}), (Gpu("NVIDIA H100 80GB HBM3", 81559),)),
    ]
    candidates = [Candidate(f"f{i:05d}", *classes[i % len(classes)]) for i in range(n_followers)]
    loads: dict[str, Load] = {}
    for _ in range(n_queued):
        fid = candidates[rng.randrange(n_followers)].follower_id
        loads[fid] = loads.get(fid, Load()).plus(rng.uniform(10, 3600))
    kinds = [
        QueuedJob("j", 1, frozenset({"onnxruntime"}), 60.0),
        QueuedJob("j", 1, frozenset({"triton"}), 60.0, Needs(gpu=True)),
        QueuedJob("j", 1, frozenset({"onnxruntime"}), 60.0, Needs(gpu_model="H100", min_gpu_memory_mb=80000)),
    ]
    out: dict[str, float] = {}
    gc.disable()  # a collector pause is not the decision's cost; it is reported separately by its absence
    for policy in ("queue_aware", "least_queue_length", "round_robin"):
        t0 = time.perf_counter()
        index = PlacementIndex(candidates, loads, policy=policy)  # type: ignore[arg-type]
        build_ms = (time.perf_counter() - t0) * 1e3
        times = []
        for i in range(decisions):
            job = kinds[i % len(kinds)]
            t0 = time.perf_counter_ns()
            fid = index.choose(job)
            assert fid is not None
            index.add(fid, job.estimate_s)
            times.append((time.perf_counter_ns() - t0) / 1e6)
        # The naive alternative: scan every follower for every job.
        t0 = time.perf_counter()
        scans = 200
        for i in range(scans):
            job = kinds[i % len(kinds)]
            from leader.placement.placer import unable_reason

            min(
                (c for c in candidates if unable_reason(job, c) is None),
                key=lambda c: (loads.get(c.follower_id, Load()).seconds, c.follower_id),
            )
        scan_ms = (time.perf_counter() - t0) * 1e3 / scans
        out[policy] = {
            "build_ms": build_ms,
            "p50_ms": pct(times, 0.5),
            "p99_ms": pct(times, 0.99),
            "max_ms": max(times),
            "scan_ms": scan_ms,
        }
    gc.enable()
    return out


# --- 3. what the Mongo round trips cost (SecantusDB, the embedded default; a real mongod is faster) ----------


def _services(workdir: Path) -> LocalStack:
    """Redis and SecantusDB (in memory: this measures round trips, not the disk) through benchfleet.stack."""
    stack = LocalStack(workdir / "services", base_env={"PATH": "/usr/bin:/bin"})
    stack.start_redis()
    stack.start_mongo(in_memory=True)
    return stack


def _template_job() -> dict:  # type: ignore[type-arg]
    """One realistic job document (spec, points, model snapshot) as insert_job stores it, to clone."""
    from common.spec.grid import estimate_seconds, expand
    from common.spec.parse import parse_spec_yaml
    from common.wire.models import ModelMeta
    from leader.clock import utcnow

    spec = parse_spec_yaml(
        "name: bench\nmodel: mlp:1\nbackends: [onnxruntime]\nbatch_sizes: [1]\n"
        "load: {pattern: constant, rate: 20, duration: 1s, warmup: 0s}\n"
    )
    model = ModelMeta(
        name="mlp", version="1", format="onnx", inputs=[], outputs=[], sha256="0" * 64, size_bytes=1, created_at=utcnow()
    )
    return {
        "name": spec.name,
        "attempt": 1,
        "dispatched": True,
        "spec": spec.model_dump(mode="json"),
        "model_ref": model.ref,
        "model": model.model_dump(),
        "points": [p.model_dump(mode="json") for p in expand(spec)],
        "points_total": 1,
        "points_done": 0,
        "estimate_s": estimate_seconds(spec),
        "error": None,
        "owner": "admin",
        "history": [],
    }


async def mongo_cost(mongo_uri: str, redis_url: str, n_followers: int, n_jobs: int) -> dict[str, float]:
    """The leader's real Placer on PerfDB holding n_followers and n_jobs (90% in followers' queues, 10% at the leader).

    Reports the old per-tick scans (the whole-collection load aggregate and the sorted queue scan) beside what the
    book-based tick costs: the full load at leader start, the change feed, and ticks that place a batch.
    """
    from datetime import timedelta

    from pymongo import AsyncMongoClient

    from leader.clock import utcnow
    from leader.placement.placer import Placer
    from leader.placement.queue import TaskQueue
    from leader.store import assignments as assignments_store
    from leader.store import followers as followers_store
    from leader.store import jobs as jobs_store

    client: AsyncMongoClient = AsyncMongoClient(mongo_uri, tz_aware=True)
    db = client["bench_scheduler"]
    queue = TaskQueue(redis_url)
    try:
        await jobs_store.ensure_indexes(db)
        await followers_store.ensure_indexes(db)
        now = utcnow()
        info = {"backends": ["onnxruntime"], "gpus": []}
        await db.followers.insert_many(
            [{"_id": f"f{i:05d}", "state": "ready", "info": info, "last_seen": now} for i in range(n_followers)]
        )
        rng = random.Random(2)
        template = _template_job()
        batch = []
        t0 = time.perf_counter()
        for i in range(n_jobs):
            queued = i % 10 == 0  # 10% still in the leader's queue, the rest held by followers
            at = now - timedelta(hours=1) + timedelta(milliseconds=i)  # all older than the bench's own writes
            estimate = rng.uniform(10, 3600)
            # Held jobs are never sent again, so they carry only what placement reads (seeding stays quick).
            base = template if queued else {"attempt": 1, "dispatched": True, "spec": {"backends": ["onnxruntime"]}}
            batch.append(
                {
                    **base,
                    "_id": f"j{i:07d}",
                    "state": "queued" if queued else "assigned",
                    "follower_id": None if queued else f"f{rng.randrange(n_followers):05d}",
                    "estimate_s": estimate,
                    "base_estimate_s": estimate,
                    "created_at": at,
                    "updated_at": at,
                }
            )
            if len(batch) == 5000:
                await db.jobs.insert_many(batch, ordered=False)
                batch = []
        if batch:
            await db.jobs.insert_many(batch, ordered=False)
        print(f"  (seeded {n_jobs} jobs in {time.perf_counter() - t0:.0f}s)", flush=True)

        # Jobs a follower is about to claim (full documents: a claim builds the task from them).
        claimable = [f"c{i:04d}" for i in range(60)]
        await db.jobs.insert_many(
            [
                {**template, "_id": cid, "state": "assigned", "follower_id": "f00000", "created_at": now, "updated_at": now}
                for cid in claimable
            ]
        )

        async def once(coro_fn: Callable[[], object]) -> float:
            t0 = time.perf_counter()
            await coro_fn()  # type: ignore[misc]
            return (time.perf_counter() - t0) * 1e3

        out = {
            "old_active_loads_ms": await once(lambda: assignments_store.active_loads(db)),
            "old_queued_scan_ms": await once(lambda: assignments_store.queued_jobs(db, limit=500)),
        }
        placer = Placer(db=db, queue=queue, interval_s=1.0)
        out["full_load_ms"] = await once(placer.sync)
        out["feed_idle_ms"] = await once(placer.sync)
        ticks = []
        for _ in range(3):
            t0 = time.perf_counter()
            await placer.tick()
            ticks.append({**placer.last_tick, "total_ms": (time.perf_counter() - t0) * 1e3})
        for k, tick in enumerate(ticks):
            print(
                f"  tick {k + 1}: {tick['total_ms']:.0f} ms, placed {tick['placed']:.0f} of {tick['queued']:.0f} queued; "
                f"feed {tick['sync_ms']:.0f} ms, candidates {tick.get('candidates_ms', 0):.0f} ms, "
                f"placing {tick.get('place_ms', 0):.0f} ms (of which decisions {tick.get('decide_ms', 0):.2f} ms)",
                flush=True,
            )
        steady = ticks[1:]  # the first one also pays the book's first feed after the load
        placed = sum(t["placed"] for t in steady)
        out["tick_ms"] = statistics.fmean(t["total_ms"] for t in steady)
        out["tick_feed_ms"] = statistics.fmean(t["sync_ms"] for t in steady)
        out["tick_candidates_ms"] = statistics.fmean(t.get("candidates_ms", 0.0) for t in steady)
        out["per_placement_ms"] = sum(t["total_ms"] for t in steady) / max(placed, 1)
        out["per_decision_us"] = sum(t.get("decide_ms", 0.0) for t in steady) * 1e3 / max(placed, 1)
        out.update(await claim_cost(db, claimable))
        write = db.jobs.update_one
        out["one_write_ms"] = min([await once(lambda: write({"_id": "j0000001"}, {"$set": {"x": 1}})) for _ in range(20)])
        # A leader restart with the same PerfDB: a fresh placer's book agrees with the old one.
        fresh = Placer(db=db, queue=queue, interval_s=1.0)
        await fresh.sync()
        await placer.sync()
        assert placer.book is not None and fresh.book is not None
        assert set(fresh.book.queued) == set(placer.book.queued)
        assert {f: (round(v.seconds, 3), v.jobs) for f, v in fresh.book.loads.items()} == {
            f: (round(v.seconds, 3), v.jobs) for f, v in placer.book.loads.items()
        }, "the book rebuilt from PerfDB differs from the one kept by the feed"
        return out
    finally:
        queue.close()
        await client.drop_database("bench_scheduler")
        await client.close()


async def claim_cost(db, claimable: list[str]) -> dict[str, float]:  # type: ignore[no-untyped-def]
    """A follower's claim (assigned → running) as the leader does it now, beside the findAndModify it replaced.

    Both run on the same PerfDB in the same run: half the claimable jobs each, interleaved, median of each.
    """
    from pymongo import ReturnDocument

    from common.wire.jobs import Claim, JobState
    from leader.store import jobs as jobs_store

    now_ms, old_ms = [], []
    for i, job_id in enumerate(claimable):
        t0 = time.perf_counter()
        if i % 2 == 0:
            await jobs_store.claim_job(db, job_id=job_id, claim=Claim(follower_id="f00000", attempt=1, incarnation="bench"))
            now_ms.append((time.perf_counter() - t0) * 1e3)
        else:
            doc = await db.jobs.find_one_and_update(
                {"_id": job_id, "state": JobState.assigned.value, "attempt": 1, "follower_id": "f00000"},
                {"$set": {"state": JobState.running.value, "dispatched": True}},
                return_document=ReturnDocument.AFTER,
            )
            assert doc is not None
            old_ms.append((time.perf_counter() - t0) * 1e3)
    return {"claim_ms": statistics.median(now_ms), "claim_find_and_modify_ms": statistics.median(old_ms)}


# --- 4. live: a leader and follower processes on this machine, short real jobs ----------------------------


# The live job mix. Why these numbers: every real job pays a fixed ~4 s here (model server start, client, reports)
# whatever its measured seconds, so sizes of 3/8/20 s became run times of 7/12/24 s; replaying that mix and those
# run times through this file's simulator predicted QA+SJF at 0.99-1.17x of RR+FCFS and 0.97-1.03x of LL+SJF
# (18-30 jobs): the earlier live design could not show the effect, and 0.83x from one round of 18 jobs was noise
# around ~1.0. Short jobs of 2 s and long ones of 30 s make run times differ ~6x; 30 jobs at ~full load build queues.
LIVE_SHORT_S, LIVE_LONG_S, LIVE_LONG_SHARE, LIVE_OVERHEAD_S = 2.0, 30.0, 0.2, 4.0


def live_mix(n_jobs: int, n_followers: int, seed: int, load: float = 1.0) -> list[tuple[float, float]]:
    """(arrival offset s, measured seconds) per job: 80% short, 20% long, Poisson arrivals at `load`.

    The seed makes every configuration of a round see the same arrivals; rounds use different seeds.
    """
    rng = random.Random(seed)
    sizes = [LIVE_LONG_S if rng.random() < LIVE_LONG_SHARE else LIVE_SHORT_S for _ in range(n_jobs)]
    per_job_s = statistics.fmean(sizes) + LIVE_OVERHEAD_S
    rate = load * n_followers / per_job_s
    t, out = 0.0, []
    for size in sizes:
        out.append((round(t, 2), size))
        t += rng.expovariate(rate)
    return out


@dataclass
class LiveJob:
    """What one live job did (times in epoch seconds): its measured seconds, the leader's estimate, its transitions."""

    seconds: float
    estimate_s: float
    actual_s: float
    follower_id: str
    created: float
    assigned: float
    started: float
    ended: float

    @property
    def jct(self) -> float:
        return self.ended - self.created


def live_diagnostics(name: str, order: str, rows: list[LiveJob]) -> dict[str, float]:
    """Print why a policy did what it did: run time per size, estimate error, waits, and whether tier 2 was honoured."""
    by_size: dict[float, list[LiveJob]] = {}
    for row in rows:
        by_size.setdefault(row.seconds, []).append(row)
    parts = []
    for size, group in sorted(by_size.items()):
        parts.append(
            f"{size:.0f}s x{len(group)}: run {statistics.fmean(r.actual_s for r in group):.1f}s "
            f"est {statistics.fmean(r.estimate_s for r in group):.1f}s"
        )
    overhead = statistics.fmean(r.actual_s - r.seconds for r in rows)
    err = statistics.fmean(abs(r.estimate_s - r.actual_s) / r.actual_s for r in rows if r.actual_s > 0)
    # At each start: the jobs its follower held then (assigned, not started). Tier 2 can only reorder those; the
    # start is "in order" if it was the one the follower's policy ranks first (shortest estimate, or first assigned;
    # ageing at 0.01 s/s changes no choice within these few seconds).
    waiting, in_order, choices = [], 0, 0
    for row in rows:
        rivals = [o for o in rows if o.follower_id == row.follower_id and o.assigned <= row.started < o.started]
        waiting.append(len(rivals))
        if rivals:
            choices += 1
            if order == "sjf":
                in_order += all(row.estimate_s <= o.estimate_s for o in rivals)
            else:
                in_order += all(row.assigned <= o.assigned for o in rivals)
    busy: dict[str, float] = {}
    for r in rows:
        busy[r.follower_id] = busy.get(r.follower_id, 0.0) + r.actual_s
    print(
        f"    {name}: {'; '.join(parts)}; fixed cost per job {overhead:.1f}s; |estimate-actual|/actual {err:.0%}; "
        f"placed {statistics.fmean(r.assigned - r.created for r in rows):.2f}s after submit; "
        f"jobs held by the follower at each start: mean {statistics.fmean(waiting):.1f} max {max(waiting)}; "
        f"starts in {order} order {in_order}/{choices}; busy s per follower "
        f"{', '.join(f'{v:.0f}' for _, v in sorted(busy.items()))}",
        flush=True,
    )
    return {"overhead_s": overhead, "estimate_err": err, "held_mean": statistics.fmean(waiting)}


def live_prediction(mix: list[tuple[float, float]], rows: list[LiveJob], n_followers: int) -> dict[str, float]:
    """The simulator on this round's arrivals with the run times measured live: the ratio the live run should show."""
    run: dict[float, list[float]] = {}
    for row in rows:
        run.setdefault(row.seconds, []).append(row.actual_s)
    mean_run = {size: statistics.fmean(v) for size, v in run.items()}
    est = {size: statistics.fmean(r.estimate_s for r in rows if r.seconds == size) for size in mean_run}
    out = {}
    for name, policy, order in CONFIGS:
        jobs = [SimJob(i, offset, mean_run[size], est[size]) for i, (offset, size) in enumerate(mix)]
        simulate(jobs, n_followers, policy, order, 0.0)
        out[name] = statistics.fmean(j.end - j.arrival for j in jobs)
    return out


def live_run(
    workdir: Path, redis_url: str, mongo_uri: str, n_followers: int, mix: list[tuple[float, float]], configs: list
) -> tuple[dict[str, dict[str, float]], list[LiveJob]]:
    """Per configuration: a fresh leader (placement policy) and followers (order), the same arrivals of real jobs."""
    import uuid

    from benchfleet.generate.modelgen import mlp_onnx

    out: dict[str, dict[str, float]] = {}
    every: list[LiveJob] = []
    for name, policy, order in configs:
        stack = LocalStack(
            workdir / f"live-{name}", mongo_uri=mongo_uri, redis_url=redis_url, db_name=f"bench_live_{uuid.uuid4().hex[:8]}",
            base_env={"PATH": "/usr/bin:/bin"},
            env={
                "BENCHFLEET_LEADER_PLACEMENT_POLICY": policy,
                "BENCHFLEET_FOLLOWER_ORDER": order,
                "BENCHFLEET_FOLLOWER_HEARTBEAT_INTERVAL_S": "0.5",
                "BENCHFLEET_FOLLOWER_METRICS_PORT": "-1",
            },
        )  # fmt: skip
        try:
            leader = stack.start_leader()
            with stack.client() as client:
                client.upload_model(mlp_onnx(), name="mlp-live", version="1")
                for i in range(n_followers):
                    stack.start_follower(f"live-{i}", wait=False)
                leader.wait_ready(lambda: sum(f.state == "ready" for f in client.followers()) == n_followers, timeout_s=90)
                ids = []
                t0 = time.monotonic()
                for i, (offset, seconds) in enumerate(mix):
                    # The same arrival times for every configuration (a submission takes milliseconds).
                    time.sleep(max(0.0, t0 + offset - time.monotonic()))
                    yaml = (
                        f"name: live-{i}\nmodel: mlp-live:1\nbackends: [onnxruntime]\nbatch_sizes: [1]\n"
                        f"load: {{pattern: constant, rate: 20, duration: {seconds}s, warmup: 0s}}\n"
                    )
                    ids.append(client.submit_yaml(yaml).id)
                leader.wait_ready(
                    lambda ids=ids: all(client.job(j).state in ("succeeded", "failed", "cancelled") for j in ids), timeout_s=900
                )
                rows = []
                for j, (_, seconds) in zip(ids, mix, strict=True):
                    view = client.job(j)
                    assert view.state == "succeeded", (view.id, view.state, view.error)

                    def at(state: str, view=view) -> float:  # type: ignore[no-untyped-def]
                        return [h.at for h in view.history if h.state == state][-1].timestamp()

                    rows.append(
                        LiveJob(
                            seconds, view.estimate_s, view.actual_s or 0.0, view.follower_id or "",
                            view.created_at.timestamp(), at("assigned"), at("running"), view.history[-1].at.timestamp(),
                        )
                    )  # fmt: skip
            jct = [r.jct for r in rows]
            out[name] = {
                "mean": statistics.fmean(jct),
                "p95": pct(jct, 0.95),
                "max_wait": max(r.started - r.created for r in rows),
            }
            out[name]["load1"] = os.getloadavg()[0]  # how busy the machine was (other processes included)
            print(
                f"  live {name:8s} mean JCT {out[name]['mean']:6.2f}s  p95 {out[name]['p95']:6.2f}s  "
                f"longest wait {out[name]['max_wait']:6.2f}s  (host load average {out[name]['load1']:.1f})",
                flush=True,
            )
            out[name].update(live_diagnostics(name, order, rows))
            every.extend(rows)
        finally:
            stack.close()
    return out, every


def live_rounds(
    workdir: Path, redis_url: str, mongo_uri: str, n_followers: int, n_jobs: int, seed: int, rounds: int, load: float
) -> dict[str, str]:
    """Several rounds, each with its own seed (arrivals) and the configurations in a rotated order; ratios per round."""
    per_round: list[dict[str, dict[str, float]]] = []
    predicted: list[dict[str, float]] = []
    for r in range(rounds):
        mix = live_mix(n_jobs, n_followers, seed + r, load)
        configs = CONFIGS[r % len(CONFIGS) :] + CONFIGS[: r % len(CONFIGS)]  # the machine's noise drifts: rotate
        print(
            f"  round {r + 1}/{rounds}: seed {seed + r}, {len(mix)} jobs "
            f"({sum(s == LIVE_LONG_S for _, s in mix)} long), arrivals over {mix[-1][0]:.0f} s, "
            f"order {', '.join(c[0] for c in configs)}",
            flush=True,
        )
        result, rows = live_run(workdir, redis_url, mongo_uri, n_followers, mix, configs)
        per_round.append(result)
        pred = live_prediction(mix, rows, n_followers)
        predicted.append(pred)
        print(
            f"  round {r + 1}: QA+SJF {result['rr_fcfs']['mean'] / result['qa_sjf']['mean']:.2f}x of RR+FCFS, "
            f"{result['ll_sjf']['mean'] / result['qa_sjf']['mean']:.2f}x of LL+SJF (mean JCT); the simulator on the same "
            f"arrivals and measured run times predicts {pred['rr_fcfs'] / pred['qa_sjf']:.2f}x and "
            f"{pred['ll_sjf'] / pred['qa_sjf']:.2f}x",
            flush=True,
        )
    out: dict[str, str] = {}
    print("  live over all rounds (mean of the rounds' figures):")
    for name, _, _ in CONFIGS:
        mean = statistics.fmean(r[name]["mean"] for r in per_round)
        p95 = statistics.fmean(r[name]["p95"] for r in per_round)
        wait = max(r[name]["max_wait"] for r in per_round)
        print(f"    {name:8s} mean JCT {mean:6.2f}s  p95 JCT {p95:6.2f}s  longest wait {wait:6.2f}s")
        out[f"live_{name}_mean_s"], out[f"live_{name}_p95_s"] = f"{mean:.2f}", f"{p95:.2f}"
    rr = [r["rr_fcfs"]["mean"] / r["qa_sjf"]["mean"] for r in per_round]
    ll = [r["ll_sjf"]["mean"] / r["qa_sjf"]["mean"] for r in per_round]
    rr95 = [r["rr_fcfs"]["p95"] / r["qa_sjf"]["p95"] for r in per_round]
    ll95 = [r["ll_sjf"]["p95"] / r["qa_sjf"]["p95"] for r in per_round]
    prr = statistics.fmean(p["rr_fcfs"] / p["qa_sjf"] for p in predicted)
    pll = statistics.fmean(p["ll_sjf"] / p["qa_sjf"] for p in predicted)
    beat_both = sum(a > 1 and b > 1 for a, b in zip(rr, ll, strict=True))
    print(
        f"  live: QA+SJF is {statistics.fmean(rr):.2f}x better than RR+FCFS (rounds {', '.join(f'{x:.2f}' for x in rr)}) "
        f"and {statistics.fmean(ll):.2f}x better than LL+SJF (rounds {', '.join(f'{x:.2f}' for x in ll)}) in mean JCT; "
        f"p95 {statistics.fmean(rr95):.2f}x and {statistics.fmean(ll95):.2f}x; better than both in {beat_both}/{rounds} "
        f"rounds. Predicted by the simulator from the same rounds: {prr:.2f}x and {pll:.2f}x",
        flush=True,
    )
    out.update(
        live_rr_over_qa=f"{statistics.fmean(rr):.2f}",
        live_ll_over_qa=f"{statistics.fmean(ll):.2f}",
        live_rr_over_qa_p95=f"{statistics.fmean(rr95):.2f}",
        live_ll_over_qa_p95=f"{statistics.fmean(ll95):.2f}",
        live_rounds=str(rounds),
        live_rounds_qa_best=str(beat_both),
        live_predicted_rr_over_qa=f"{prr:.2f}",
        live_predicted_ll_over_qa=f"{pll:.2f}",
    )
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sim-jobs", type=int, default=2000)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--sim-followers", type=int, default=4)
    parser.add_argument("--sim-load", type=float, default=0.85)
    parser.add_argument("--ageing", type=float, default=0.01, help="seconds of estimate forgiven per second waited")
    parser.add_argument("--wait-bound", type=float, default=WAIT_BOUND, help="the follower's wait bound (x FCFS turnaround)")
    parser.add_argument("--wait-jobs", type=int, default=2000, help="jobs per seed in each cell of the bounded-wait table")
    parser.add_argument("--wait-seeds", type=int, default=3)
    parser.add_argument("--followers", type=int, default=1000)
    parser.add_argument("--queued", type=int, default=100_000)
    parser.add_argument("--decisions", type=int, default=20_000)
    parser.add_argument("--mongo-jobs", type=int, default=100_000)
    parser.add_argument("--live-followers", type=int, default=3)
    parser.add_argument("--live-jobs", type=int, default=30)
    parser.add_argument("--live-seed", type=int, default=1)
    parser.add_argument("--live-load", type=float, default=1.0, help="offered load of the live arrivals (1.0: followers busy)")
    parser.add_argument("--live-repeats", type=int, default=3, help="rounds (each its own seed) over the three configurations")
    parser.add_argument("--skip-mongo", action="store_true")
    parser.add_argument("--skip-live", action="store_true")
    args = parser.parse_args()
    result: dict[str, str] = {}

    print(
        f"1. simulation: {args.sim_followers} followers, {args.sim_jobs} jobs x {args.seeds} seeds, load {args.sim_load}, "
        "60% 1-5 min / 30% 10-30 min / 10% 60-120 min, estimates with ~20% error",
        flush=True,
    )
    sim = run_simulation(args.sim_jobs, args.seeds, args.sim_followers, args.sim_load, args.ageing, args.wait_bound)
    for name, row in sim.items():
        print(
            f"  sim {name:8s} mean JCT {row['mean']:8.1f} min  p95 {row['p95']:8.1f} min  longest wait {row['max_wait']:8.1f} min"
        )
    ratio_rr = sim["rr_fcfs"]["mean"] / sim["qa_sjf"]["mean"]
    ratio_ll = sim["ll_sjf"]["mean"] / sim["qa_sjf"]["mean"]
    print(f"  QA+SJF is {ratio_rr:.2f}x better than RR+FCFS (floor 1.43x) and {ratio_ll:.2f}x better than LL+SJF in mean JCT")
    result.update(
        sim_rr_over_qa=f"{ratio_rr:.2f}",
        sim_ll_over_qa=f"{ratio_ll:.2f}",
        sim_qa_mean_min=f"{sim['qa_sjf']['mean']:.1f}",
        sim_qa_p95_min=f"{sim['qa_sjf']['p95']:.1f}",
        sim_qa_max_wait_min=f"{sim['qa_sjf']['max_wait']:.1f}",
        sim_rr_max_wait_min=f"{sim['rr_fcfs']['max_wait']:.1f}",
        sim_floor_met=str(ratio_rr >= 1.43).lower(),
    )

    print(
        f"1b. bounded waits: QA+SJF with the follower's wait bound ({args.wait_bound:g} x the FCFS turnaround) against "
        f"RR+FCFS on the same streams ({args.wait_jobs} jobs x {args.wait_seeds} seeds per cell); `no bound` is QA+SJF "
        "without it. Ratios: mean JCT RR/QA (the win) and longest wait QA/RR (worst seed; the bound's target is <= 2)",
        flush=True,
    )
    table = wait_table(args.wait_jobs, args.wait_seeds, args.ageing, args.wait_bound)
    print(f"  {'mix, followers, load, estimate error, arrivals':48s} {'mean win':>9s} {'wait':>6s} {'worst':>6s} "
          f"{'no bound: win':>14s} {'wait':>6s}")  # fmt: skip
    for cell, row in table:
        print(f"  {cell.label:48s} {row['mean_win']:8.2f}x {row['wait_ratio']:6.2f} {row['worst_wait_ratio']:6.2f} "
              f"{row['nobound_mean_win']:13.2f}x {row['nobound_wait_ratio']:6.2f}")  # fmt: skip
    worst = max(row["worst_wait_ratio"] for _, row in table)
    nobound = max(row["nobound_wait_ratio"] for _, row in table)
    mixed_wins = [row["mean_win"] for cell, row in table if cell.mix == "mixed"]
    uniform_wins = [row["mean_win"] for cell, row in table if cell.mix == "uniform"]
    print(f"  longest wait at most {worst:.2f}x RR+FCFS's over all {len(table)} cells (without the bound: {nobound:.2f}x); "
          f"mean-JCT win on the InferBench mix {min(mixed_wins):.2f}-{max(mixed_wins):.2f}x, on uniform sizes "
          f"{min(uniform_wins):.2f}-{max(uniform_wins):.2f}x")  # fmt: skip
    result.update(
        waits_cells=str(len(table)),
        waits_worst_ratio=f"{worst:.2f}",
        waits_bound_met=str(worst <= 2.0).lower(),
        waits_nobound_worst_ratio=f"{nobound:.2f}",
        waits_mixed_win_min=f"{min(mixed_wins):.2f}",
        waits_uniform_win_min=f"{min(uniform_wins):.2f}",
    )

    print(
        f"2. placement decision: {args.followers} followers, {args.queued} jobs in their queues, {args.decisions} decisions",
        flush=True,
    )
    cost = decision_cost(args.followers, args.queued, args.decisions)
    for policy, row in cost.items():
        print(
            f"  {policy:18s} index build {row['build_ms']:.2f} ms/tick; decision p50 {row['p50_ms'] * 1e3:.1f} us "
            f"p99 {row['p99_ms'] * 1e3:.1f} us max {row['max_ms'] * 1e3:.1f} us; naive scan {row['scan_ms']:.2f} ms"
        )
    result.update(
        decision_p99_us=f"{cost['queue_aware']['p99_ms'] * 1e3:.1f}",
        decision_max_us=f"{cost['queue_aware']['max_ms'] * 1e3:.1f}",
        index_build_ms=f"{cost['queue_aware']['build_ms']:.2f}",
        naive_scan_ms=f"{cost['queue_aware']['scan_ms']:.2f}",
    )

    if not (args.skip_mongo and args.skip_live):
        with tempfile.TemporaryDirectory() as tmp:
            workdir = Path(tmp)
            services = _services(workdir)
            redis_url, mongo_uri = str(services.redis_url), str(services.mongo_uri)
            try:
                if not args.skip_mongo:
                    print(f"3. Mongo round trips (SecantusDB): {args.followers} followers, {args.mongo_jobs} jobs", flush=True)
                    mongo = asyncio.run(mongo_cost(mongo_uri, redis_url, args.followers, args.mongo_jobs))
                    for key, value in mongo.items():
                        print(f"  {key:22s} {value:10.1f}")
                    print(
                        f"  old design: {mongo['old_active_loads_ms'] + mongo['old_queued_scan_ms']:.0f} ms of scans every tick; "
                        f"now {mongo['tick_ms']:.0f} ms per tick placing a batch = {mongo['per_placement_ms']:.2f} ms per job "
                        f"placed (decision {mongo['per_decision_us']:.1f} us, the rest Mongo writes and the Celery send)"
                    )
                    result.update({f"mongo_{k}": f"{v:.1f}" for k, v in mongo.items()})
                if not args.skip_live:
                    print(
                        f"4. live: {args.live_followers} follower processes, {args.live_jobs} real jobs per configuration "
                        f"({1 - LIVE_LONG_SHARE:.0%} {LIVE_SHORT_S:.0f} s / {LIVE_LONG_SHARE:.0%} {LIVE_LONG_S:.0f} s measured, "
                        f"load {args.live_load}), {args.live_repeats} round(s). The machine is shared and noisy: read with care.",
                        flush=True,
                    )
                    result.update(
                        live_rounds(
                            workdir, redis_url, mongo_uri, args.live_followers, args.live_jobs, args.live_seed,
                            args.live_repeats, args.live_load,
                        )
                    )  # fmt: skip
            finally:
                services.close()
    print("RESULT scheduler " + " ".join(f"{k}={v}" for k, v in result.items()))


if __name__ == "__main__":
    main()
