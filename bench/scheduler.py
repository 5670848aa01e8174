"""The two-tier scheduler measured: a discrete-event simulation of the InferBench experiment; teams sharing the
fleet (shares, their cost, priorities: bench/scheduler_teams.py) and duration estimates (bench/scheduler_estimates.py);
a table of bounded waits over job mixes (heavy-tailed, bimodal, uniform; 2 and 8 followers; loads 0.7 and 0.95;
estimate errors 20% and 60%; Poisson and bursty arrivals); the placement decision's cost with 1,000 followers and
100,000 queued jobs (plus what the Mongo round trips cost); and a live run on this machine with several follower
processes and short real jobs.

Usage: .venv/bin/python -m bench.scheduler [--skip-live] [--skip-mongo] [--sim-jobs 2000] [--seeds 5]

Every figure is measured in this run; the last line is `RESULT scheduler key=value ...`.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
from pathlib import Path

from bench.scheduler_estimates import estimate_figures
from bench.scheduler_live import LIVE_LONG_S, LIVE_LONG_SHARE, LIVE_SHORT_S, live_rounds, local_services, mongo_cost
from bench.scheduler_live_teams import live_teams
from bench.scheduler_sim import decision_cost, run_simulation, wait_table
from bench.scheduler_teams import WEIGHTS, team_figures
from common.fairshare import WAIT_BOUND


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
    parser.add_argument("--teams-jobs", type=int, default=200, help="team a's jobs in each team scenario (team b: a tenth)")
    parser.add_argument("--teams-seeds", type=int, default=6)
    parser.add_argument("--teams-followers", type=int, default=4)
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
    print(
        f"  {'mix, followers, load, estimate error, arrivals':48s} {'mean win':>9s} {'wait':>6s} {'worst':>6s} "
        f"{'no bound: win':>14s} {'wait':>6s}"
    )
    for cell, row in table:
        print(
            f"  {cell.label:48s} {row['mean_win']:8.2f}x {row['wait_ratio']:6.2f} {row['worst_wait_ratio']:6.2f} "
            f"{row['nobound_mean_win']:13.2f}x {row['nobound_wait_ratio']:6.2f}"
        )
    worst = max(row["worst_wait_ratio"] for _, row in table)
    nobound = max(row["nobound_wait_ratio"] for _, row in table)
    mixed_wins = [row["mean_win"] for cell, row in table if cell.mix == "mixed"]
    uniform_wins = [row["mean_win"] for cell, row in table if cell.mix == "uniform"]
    print(
        f"  longest wait at most {worst:.2f}x RR+FCFS's over all {len(table)} cells (without the bound: {nobound:.2f}x); "
        f"mean-JCT win on the InferBench mix {min(mixed_wins):.2f}-{max(mixed_wins):.2f}x, on uniform sizes "
        f"{min(uniform_wins):.2f}-{max(uniform_wins):.2f}x"
    )
    result.update(
        waits_cells=str(len(table)),
        waits_worst_ratio=f"{worst:.2f}",
        waits_bound_met=str(worst <= 2.0).lower(),
        waits_nobound_worst_ratio=f"{nobound:.2f}",
        waits_mixed_win_min=f"{min(mixed_wins):.2f}",
        waits_uniform_win_min=f"{min(uniform_wins):.2f}",
    )

    print(
        f"1c. teams sharing {args.teams_followers} followers (the leader's queue in the fair order, followers holding one "
        f"job each: placement_lookahead 1; {args.teams_seeds} seeds). Contention: team a floods {args.teams_jobs} short "
        "jobs (1-5 min), team b a tenth as many 10x longer, at 8x the fleet; share of follower time while each team wants "
        "at least its share of the followers (its jobs running or waiting number at least its share of them)",
        flush=True,
    )
    teams = team_figures(args.teams_jobs, args.teams_seeds, args.teams_followers)
    errors = []
    for weights in WEIGHTS:
        label = f"{weights['a']:g}to{weights['b']:g}"
        errors.append(teams[f"share_b_{label}_err"])
        print(
            f"  weights a:b {weights['a']:g}:{weights['b']:g}: b's share {teams[f'share_b_{label}']:.3f} (target "
            f"{teams[f'target_b_{label}']:.3f}, worst seed {100 * teams[f'share_b_{label}_err']:.0f}% off); today's "
            f"scheduler {teams[f'today_share_b_{label}']:.3f} (worst {100 * teams[f'today_share_b_{label}_err']:.0f}% off); "
            f"counting the tail to the first team's last start, worst {100 * teams[f'tail_share_b_{label}_err']:.0f}% off"
        )
        result[f"teams_share_b_{label}"] = f"{teams[f'share_b_{label}']:.3f}"
    print(
        f"  streams at 0.85 (team a 10x team b's jobs): mean JCT {teams['jct_vs_today_min']:.2f}-"
        f"{teams['jct_vs_today_max']:.2f}x today's two-tier scheduler's; longest wait at most "
        f"{teams['wait_vs_rr_max']:.2f}x RR+FCFS's; 5% urgent jobs wait {teams['urgent_mean_wait_min']:.1f} min on "
        f"average, normal ones {teams['normal_mean_wait_min']:.1f} min"
    )
    result.update(
        teams_share_err_max=f"{max(errors):.3f}",
        teams_jct_vs_today_max=f"{teams['jct_vs_today_max']:.3f}",
        teams_wait_vs_rr_max=f"{teams['wait_vs_rr_max']:.3f}",
        teams_urgent_wait_min=f"{teams['urgent_mean_wait_min']:.1f}",
        teams_normal_wait_min=f"{teams['normal_mean_wait_min']:.1f}",
        teams_floor_met=str(max(errors) <= 0.10 and teams["jct_vs_today_max"] <= 1.10 and teams["wait_vs_rr_max"] <= 2.0).lower(),
    )

    print(
        "1d. estimates: 20 kinds of job (true fixed cost 3-60 s, rate 1.0-1.6x the spec's load seconds, runs off by ~5%); "
        "after 20 finished jobs of a kind, the next 20 estimated from the spec alone, then from the leader's fit",
        flush=True,
    )
    runs = [estimate_figures(seed=seed) for seed in (1, 2, 3)]
    est = {key: statistics.fmean(r[key] for r in runs) for key in runs[0]}
    print(
        f"  median error: spec {100 * est['spec_median_err']:.1f}%, learned {100 * est['learned_median_err']:.1f}% "
        f"(p90 {100 * est['learned_p90_err']:.1f}%); {100 * est['within_2_spreads']:.0f}% of actuals within the learned "
        "estimate +- 2 spreads"
    )
    result.update(
        est_spec_median_err=f"{est['spec_median_err']:.3f}",
        est_learned_median_err=f"{est['learned_median_err']:.3f}",
        est_within_2_spreads=f"{est['within_2_spreads']:.2f}",
        est_floor_met=str(est["learned_median_err"] < 0.15).lower(),
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
            services = local_services(workdir)
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
                            workdir,
                            redis_url,
                            mongo_uri,
                            args.live_followers,
                            args.live_jobs,
                            args.live_seed,
                            args.live_repeats,
                            args.live_load,
                        )
                    )
                if not args.skip_live:
                    print(
                        "5. live teams: a real leader and 2 followers, team red submitting 12 jobs of 1 s and team blue 6 of "
                        "3 s at once (blue weighted 2), an admin's urgent job last; then red's daily quota used up",
                        flush=True,
                    )
                    result.update(live_teams(workdir, redis_url, mongo_uri))
            finally:
                services.close()
    print("RESULT scheduler " + " ".join(f"{k}={v}" for k, v in result.items()))


if __name__ == "__main__":
    main()
