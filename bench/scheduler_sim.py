"""The scheduler bench's simulation (bench/scheduler.py): a discrete-event model of the two-tier scheduler over job
mixes, the bounded-wait table, and the cost of one placement decision at fleet scale."""

from __future__ import annotations

import gc
import heapq
import math
import random
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from common.fairshare import WAIT_BOUND
from follower.agent.holding import HeldEntry, HoldingQueue, work_ahead
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
    team: str = ""
    priority: str = "normal"


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


def job_mix(
    n: int, followers: int, load: float, rng: random.Random, *, mix: str = "mixed", error: float = 0.2, bursty: bool = False
) -> list[SimJob]:
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


def simulate(
    jobs: list[SimJob], n_followers: int, policy: Policy, order: str, ageing_per_s: float, wait_bound: float = WAIT_BOUND
) -> list[SimJob]:
    """Tier 1 at arrival with the leader's own PlacementIndex; tier 2 with the follower's own HoldingQueue ordering
    (its sort key and its `work_ahead`, the FCFS wait each job records at acceptance; minutes throughout)."""
    clock = [0.0]
    with tempfile.TemporaryDirectory() as tmp:
        # Only its ordering function is used (no files): the exact key the follower's run loop sorts by.
        ordering = HoldingQueue(
            Path(tmp),
            order=order,
            ageing_per_s=ageing_per_s / 60.0,
            wait_bound=wait_bound,  # type: ignore[arg-type]
            clock=lambda: clock[0],
        )
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
        entry = HeldEntry(str(job.id), 1, job.estimate, job.arrival, job.id, {}, Path(), ahead_s=ahead, priority=job.priority)
        target.held.append(entry)
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


def run_simulation(
    n_jobs: int, seeds: int, followers: int, load: float, ageing: float, wait_bound: float = WAIT_BOUND
) -> dict[str, dict[str, float]]:
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
                            for key, policy, order, bound in (
                                ("rr", "round_robin", "fcfs", 0.0),
                                ("qa", "queue_aware", "sjf", wait_bound),
                                ("qa_nobound", "queue_aware", "sjf", 0.0),
                            ):
                                stream = job_mix(
                                    n_jobs, followers, load, random.Random(seed), mix=mix, error=error, bursty=bursty
                                )
                                done = simulate(stream, followers, policy, order, ageing, bound)  # type: ignore[arg-type]
                                means[key].append(statistics.fmean(j.end - j.arrival for j in done))
                                waits[key].append(max(j.start - j.arrival for j in done))
                        rr_mean, rr_wait = statistics.fmean(means["rr"]), statistics.fmean(waits["rr"])
                        rows.append(
                            (
                                cell,
                                {
                                    "mean_win": rr_mean / statistics.fmean(means["qa"]),
                                    "wait_ratio": statistics.fmean(waits["qa"]) / rr_wait,
                                    "worst_wait_ratio": max(q / r for q, r in zip(waits["qa"], waits["rr"], strict=True)),
                                    "nobound_mean_win": rr_mean / statistics.fmean(means["qa_nobound"]),
                                    "nobound_wait_ratio": statistics.fmean(waits["qa_nobound"]) / rr_wait,
                                },
                            )
                        )
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
