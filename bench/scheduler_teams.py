"""The scheduler bench's teams (bench/scheduler.py, part 5): the fleet shared between teams, simulated with the leader's
own order (common/fairshare.py: order_key, as leader/placement/placer.py sorts its queue with `placement_lookahead`).

Followers hold at most `lookahead` jobs beside the one they run; the rest wait in the leader's queue, which sends the
first in the fair order to the follower with the least work when one has room. Against it: today's two-tier
scheduler (queue-aware placement at arrival, each follower shortest-first over what it holds) and round-robin with
first-come-first-served. Minutes throughout.
"""

from __future__ import annotations

import heapq
import random
import statistics
from dataclasses import dataclass

from bench.scheduler_sim import SimJob, job_sizes, simulate
from common.fairshare import AGEING_PER_S, TOLERANCE, WAIT_BOUND, WINDOW_S, TeamUse, order_key, use_in_window


@dataclass
class _Waiting:
    job: SimJob
    ahead: float  # FCFS wait at arrival: all work queued and held, shared over the followers


def simulate_shared(
    jobs: list[SimJob],
    followers: int,
    *,
    lookahead: int = 1,
    weights: dict[str, float] | None = None,
    tolerance: float = TOLERANCE,
    ageing_per_s: float = AGEING_PER_S,
    wait_bound: float = WAIT_BOUND,
) -> list[SimJob]:
    """The leader's queue in the fair order (no `weights`: teams not told apart), followers holding `lookahead`."""
    window = WINDOW_S / 60.0
    waiting: list[_Waiting] = []
    held: list[list[_Waiting]] = [[] for _ in range(followers)]
    running: list[SimJob | None] = [None] * followers
    runs: list[tuple[str, float, float | None]] = []
    done: list[tuple[float, int, int]] = []

    def uses(now: float) -> dict[str, TeamUse]:
        if not weights:
            return {}
        runs[:] = [r for r in runs if r[2] is None or r[2] > now - window]
        used = use_in_window(runs, now, window)
        active = {w.job.team for w in waiting} | {w.job.team for h in held for w in h} | {j.team for j in running if j}
        on = [j.team for j in running if j is not None]
        return {team: TeamUse(w, used.get(team, 0.0), team in active, on.count(team)) for team, w in weights.items()}

    def key(w: _Waiting, now: float, fleet: dict[str, TeamUse]) -> tuple[tuple[int, int, int, float], int]:
        fair = order_key(
            estimate_s=w.job.estimate,
            waited_s=now - w.job.arrival,
            ahead_s=w.ahead,
            priority=w.job.priority,
            team=w.job.team,
            uses=fleet,
            ageing_per_s=ageing_per_s / 60.0,
            wait_bound=wait_bound,
            tolerance=tolerance,
            fleet=followers,
        )
        return fair, w.job.id

    def work(i: int, now: float) -> float:
        job = running[i]
        return sum(w.job.estimate for w in held[i]) + (max(0.0, job.start + job.estimate - now) if job else 0.0)

    def start(i: int, now: float) -> None:
        if running[i] is None and held[i]:
            fleet = uses(now)
            best = min(held[i], key=lambda w: key(w, now, fleet))
            held[i].remove(best)
            job = best.job
            job.start, running[i] = now, job
            heapq.heappush(done, (now + job.size, job.id, i))
            runs.append((job.team, now, now + job.size))

    def step(now: float) -> None:
        while waiting:
            room = [i for i in range(followers) if len(held[i]) + (running[i] is not None) < 1 + lookahead]
            if not room:
                break
            fleet = uses(now)
            best = min(waiting, key=lambda w: key(w, now, fleet))
            waiting.remove(best)
            target = min(room, key=lambda i: (work(i, now), i))
            held[target].append(best)
            start(target, now)
        for i in range(followers):
            start(i, now)

    def finish_until(t: float) -> None:
        while done and done[0][0] <= t:
            end, jid, i = heapq.heappop(done)
            job = running[i]
            assert job is not None and job.id == jid
            job.end, running[i] = end, None
            step(end)

    for job in jobs:
        finish_until(job.arrival)
        now = job.arrival
        ahead = (sum(w.job.estimate for w in waiting) + sum(work(i, now) for i in range(followers))) / followers
        waiting.append(_Waiting(job, ahead))
        step(now)
    finish_until(float("inf"))
    return jobs


def two_teams(
    n_big: int,
    followers: int,
    load: float,
    rng: random.Random,
    *,
    ratio: int = 10,
    scale: float = 1.0,
    bursty: bool = True,
    error: float = 0.2,
    urgent: float = 0.0,
) -> list[SimJob]:
    """Team a submits `ratio` x the jobs of team b, whose jobs are `scale` x the size (the InferBench mix each); arrivals
    at the offered utilisation `load` (Poisson, or bursts of 1-20); estimates off by a log-normal factor; a share
    `urgent` of the jobs urgent."""
    sized = [("a", s) for s in job_sizes("mixed", n_big, rng)] + [
        ("b", scale * s) for s in job_sizes("mixed", n_big // ratio, rng)
    ]
    rng.shuffle(sized)
    rate = load * followers / statistics.fmean(s for _, s in sized)
    t, jobs, burst = 0.0, [], 0
    for i, (team, size) in enumerate(sized):
        if burst == 0:
            burst = rng.randint(1, 20) if bursty else 1
            t += rng.expovariate(rate / burst) if bursty else rng.expovariate(rate)
        burst -= 1
        priority = "urgent" if rng.random() < urgent else "normal"
        jobs.append(SimJob(i, t, size, size * rng.lognormvariate(0.0, error), team=team, priority=priority))
    return jobs


def contended_shares(jobs: list[SimJob], weights: dict[str, float], followers: int) -> tuple[dict[str, float], float]:
    """Each team's share of the follower time used in the contention window, and the window's length. Contended means
    every team wants at least its fair share of the fleet: its jobs running or waiting (at the leader or held by a
    follower) number at least its weight's share of the followers. The window runs from when that first holds to when
    it first fails after (a team left with less work than its share gets what it asks, not its share: max-min fairness)."""
    teams = list(weights)
    fair = {t: weights[t] / sum(weights.values()) * followers for t in teams}
    events = sorted({j.arrival for j in jobs} | {j.start for j in jobs} | {j.end for j in jobs})
    begin = end = None
    for t in events:
        wants = {x: sum(1 for j in jobs if j.team == x and j.arrival <= t < j.end) for x in teams}
        contended = all(wants[x] >= fair[x] for x in teams)
        if begin is None and contended:
            begin = t
        elif begin is not None and not contended:
            end = t
            break
    if begin is None or end is None:
        return dict.fromkeys(teams, float("nan")), 0.0
    got = dict.fromkeys(teams, 0.0)
    for job in jobs:
        got[job.team] += max(0.0, min(job.end, end) - max(job.start, begin))
    total = sum(got.values())
    return {x: got[x] / total if total else float("nan") for x in teams}, end - begin


def shares_until_last_start(jobs: list[SimJob], teams: list[str]) -> dict[str, float]:
    """Each team's share of the follower time from when every team has submitted to when the first team's last job
    starts: the window this bench used before contended_shares, which also counts the tail where a team has less work
    left than its share (and so takes less, as it should)."""
    begin = max(min(j.arrival for j in jobs if j.team == t) for t in teams)
    end = min(max(j.start for j in jobs if j.team == t) for t in teams)
    got = dict.fromkeys(teams, 0.0)
    for job in jobs:
        got[job.team] += max(0.0, min(job.end, end) - max(job.start, begin))
    total = sum(got.values())
    return {x: got[x] / total if total else float("nan") for x in teams}


def flood(n_short: int, followers: int, rng: random.Random, *, ratio: int = 10, load: float = 8.0) -> list[SimJob]:
    """Contention: team a submits `ratio` x the jobs of team b, short (1-5 min) against b's 10x longer (10-50 min), so
    both want the whole fleet; all arrive at `load` x what the fleet can run (a burst both teams queue behind)."""
    sized = [("a", rng.uniform(1, 5)) for _ in range(n_short)] + [("b", rng.uniform(10, 50)) for _ in range(n_short // ratio)]
    rng.shuffle(sized)
    rate = load * followers / statistics.fmean(s for _, s in sized)
    t, jobs = 0.0, []
    for i, (team, size) in enumerate(sized):
        t += rng.expovariate(rate)
        jobs.append(SimJob(i, t, size, size * rng.lognormvariate(0.0, 0.2), team=team))
    return jobs


WEIGHTS: list[dict[str, float]] = [{"a": 1.0, "b": 1.0}, {"a": 1.0, "b": 2.0}, {"a": 2.0, "b": 1.0}]


def team_figures(n_jobs: int, seeds: int, followers: int, lookahead: int = 1) -> dict[str, float]:
    """Team b's share of the follower time in the contention window of a flood (weights 1:1, 1:2, 2:1) with the fair
    order and with today's two-tier scheduler; the fair order's mean JCT against today's and its longest wait against
    round-robin + FCFS on Poisson and bursty streams at 0.85 (team a 10x team b's jobs, the same sizes); the mean wait
    of urgent jobs (5%) against normal ones."""
    out: dict[str, float] = {}
    for weights in WEIGHTS:
        target = weights["b"] / sum(weights.values())
        label = f"{weights['a']:g}to{weights['b']:g}"
        fair, today, tail = [], [], []
        for seed in range(seeds):
            run = simulate_shared(flood(n_jobs, followers, random.Random(seed)), followers, lookahead=lookahead, weights=weights)
            fair.append(contended_shares(run, weights, followers)[0]["b"])
            tail.append(shares_until_last_start(run, ["a", "b"])["b"])
            run = simulate(flood(n_jobs, followers, random.Random(seed)), followers, "queue_aware", "sjf", AGEING_PER_S)
            today.append(contended_shares(run, weights, followers)[0]["b"])
        out[f"target_b_{label}"] = target
        out[f"share_b_{label}"] = statistics.fmean(fair)
        out[f"share_b_{label}_err"] = max(abs(x / target - 1) for x in fair)
        out[f"tail_share_b_{label}_err"] = max(abs(x / target - 1) for x in tail)
        out[f"today_share_b_{label}"] = statistics.fmean(today)
        out[f"today_share_b_{label}_err"] = max(abs(x / target - 1) for x in today)
    ratios, waits = [], []
    for bursty in (False, True):
        for seed in range(seeds):

            def stream(seed: int = seed, bursty: bool = bursty) -> list[SimJob]:
                return two_teams(n_jobs, followers, 0.85, random.Random(100 + seed), bursty=bursty)

            fair_run = simulate_shared(stream(), followers, lookahead=lookahead, weights={"a": 1.0, "b": 1.0})
            today_run = simulate(stream(), followers, "queue_aware", "sjf", AGEING_PER_S)
            rr_run = simulate(stream(), followers, "round_robin", "fcfs", AGEING_PER_S, 0.0)
            ratios.append(
                statistics.fmean(j.end - j.arrival for j in fair_run) / statistics.fmean(j.end - j.arrival for j in today_run)
            )
            waits.append(max(j.start - j.arrival for j in fair_run) / max(j.start - j.arrival for j in rr_run))
    out["jct_vs_today_max"], out["jct_vs_today_min"] = max(ratios), min(ratios)
    out["wait_vs_rr_max"] = max(waits)
    urgent_waits, normal_waits = [], []
    for seed in range(seeds):
        jobs = two_teams(n_jobs, followers, 0.85, random.Random(200 + seed), urgent=0.05)
        run = simulate_shared(jobs, followers, lookahead=lookahead, weights={"a": 1.0, "b": 1.0})
        urgent_waits += [j.start - j.arrival for j in run if j.priority == "urgent"]
        normal_waits += [j.start - j.arrival for j in run if j.priority == "normal"]
    out["urgent_mean_wait_min"], out["normal_mean_wait_min"] = statistics.fmean(urgent_waits), statistics.fmean(normal_waits)
    return out
