"""The scheduler bench's live parts (bench/scheduler.py): what the Mongo round trips of placement cost, and short real
jobs on a local fleet of several follower processes."""

from __future__ import annotations

import os
import random
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bench.scheduler_sim import CONFIGS, SimJob, pct, simulate
from benchfleet.stack import LocalStack

# --- 3. what the Mongo round trips cost (SecantusDB, the embedded default; a real mongod is faster) ----------


def local_services(workdir: Path) -> LocalStack:
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
        "load: {pattern: constant, rate: 20, duration: 1s, warmup: 0s, allow_short: true}\n"
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
            held = {"attempt": 1, "dispatched": True, "owner": "admin", "spec": {"backends": ["onnxruntime"]}}
            base = template if queued else held
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
            workdir / f"live-{name}",
            mongo_uri=mongo_uri,
            redis_url=redis_url,
            db_name=f"bench_live_{uuid.uuid4().hex[:8]}",
            base_env={"PATH": "/usr/bin:/bin"},
            env={
                "BENCHFLEET_LEADER_PLACEMENT_POLICY": policy,
                # The two tiers as the paper compares them: every job sent at once, each follower ordering its own.
                "BENCHFLEET_LEADER_PLACEMENT_LOOKAHEAD": "off",
                "BENCHFLEET_FOLLOWER_ORDER": order,
                "BENCHFLEET_FOLLOWER_HEARTBEAT_INTERVAL_S": "0.5",
                "BENCHFLEET_FOLLOWER_METRICS_PORT": "-1",
            },
        )
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
                        f"load: {{pattern: constant, rate: 20, duration: {seconds}s, warmup: 0s, allow_short: true}}\n"
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
                            seconds,
                            view.estimate_s,
                            view.actual_s or 0.0,
                            view.follower_id or "",
                            view.created_at.timestamp(),
                            at("assigned"),
                            at("running"),
                            view.history[-1].at.timestamp(),
                        )
                    )
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
