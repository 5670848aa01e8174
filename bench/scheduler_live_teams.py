"""The scheduler bench's live teams (bench/scheduler.py, part 5): a real leader and real followers on this machine,
two teams submitting real jobs at once. Team red floods short jobs, team blue a few long ones, blue weighted 2; with the
leader's queue in the fair order and followers holding no job beside the one they run (`placement_lookahead: 0`), then
as the leader ships (1), then with the two-tier scheduler that sends every job at once (`off`): each team's share of
the follower time while both had jobs waiting, from the jobs' own histories. Then an admin's urgent job
submitted last, and red's daily quota used up: its next job waits with the reason while blue's runs."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

from benchfleet.client import BenchfleetClient
from benchfleet.stack import LocalStack
from common.wire.jobs import JobView
from common.wire.teams import TeamSettings

RED_JOBS, RED_S = 12, 1.0
BLUE_JOBS, BLUE_S = 6, 3.0
DONE = ("succeeded", "failed", "cancelled")


def job_spec(name: str, model: str, seconds: float, priority: str = "normal") -> str:
    """A one-point job of `seconds` at 20 req/s on ONNX Runtime, in its priority class (the live teams' jobs)."""
    return (
        f"name: {name}\nmodel: {model}:1\nbackends: [onnxruntime]\nbatch_sizes: [1]\npriority: {priority}\n"
        f"load: {{pattern: constant, rate: 20, duration: {seconds}s, warmup: 0s, allow_short: true}}\n"
    )


def run_of(view: JobView) -> tuple[float, float]:
    """When the job's (last) run started and when it ended (epoch seconds)."""
    start = [h.at for h in view.history if h.state == "running"][-1].timestamp()
    return start, view.history[-1].at.timestamp()


def _inside(view: JobView, begin: float, end: float) -> float:
    start, stop = run_of(view)
    return max(0.0, min(stop, end) - max(start, begin))


def contended_share(jobs: dict[str, list[JobView]]) -> dict[str, float]:
    """Each team's share of the follower time from when every team's first job was submitted to when the first team's
    last job started (every team had work waiting throughout)."""
    begin = max(min(v.created_at.timestamp() for v in views) for views in jobs.values())
    end = min(max(run_of(v)[0] for v in views) for views in jobs.values())
    got = {team: sum(max(0.0, min(run_of(v)[1], end) - max(run_of(v)[0], begin)) for v in views) for team, views in jobs.items()}
    total = sum(got.values())
    return {team: (used / total if total else float("nan")) for team, used in got.items()}


def live_teams(workdir: Path, redis_url: str, mongo_uri: str, followers: int = 2) -> dict[str, str]:
    """The two configurations' shares, the urgent job's place and the quota stop, as RESULT fields."""
    from benchfleet.generate.modelgen import mlp_onnx

    out: dict[str, str] = {}
    for name, lookahead in (("fair", "0"), ("default", "1"), ("today", "off")):
        env = {
            "BENCHFLEET_FOLLOWER_HEARTBEAT_INTERVAL_S": "0.5",
            "BENCHFLEET_FOLLOWER_METRICS_PORT": "-1",
            "BENCHFLEET_LEADER_PLACEMENT_LOOKAHEAD": lookahead,
        }
        stack = LocalStack(
            workdir / f"teams-{name}",
            mongo_uri=mongo_uri,
            redis_url=redis_url,
            db_name=f"bench_teams_{uuid.uuid4().hex[:8]}",
            base_env={"PATH": "/usr/bin:/bin"},
            env=env,
        )
        try:
            leader = stack.start_leader()
            with stack.client() as admin:
                teams = {}
                for team in ("red", "blue"):
                    issued = admin.create_token(f"{team}-user", "submitter", team=team)
                    teams[team] = BenchfleetClient(stack.url, issued.token)
                    teams[team].upload_model(mlp_onnx(), name=f"{team}-live", version="1")
                admin.set_team("blue", TeamSettings(weight=2.0))
                for i in range(followers):
                    stack.start_follower(f"teams-{i}", wait=False)
                leader.wait_ready(lambda: sum(f.state == "ready" for f in admin.followers()) == followers, timeout_s=90)
                ids: dict[str, list[str]] = {"red": [], "blue": []}
                for i in range(max(RED_JOBS, BLUE_JOBS)):  # interleaved, all at once
                    if i < RED_JOBS:
                        ids["red"].append(teams["red"].submit_yaml(job_spec(f"red-{i}", "red-live", RED_S)).id)
                    if i < BLUE_JOBS:
                        ids["blue"].append(teams["blue"].submit_yaml(job_spec(f"blue-{i}", "blue-live", BLUE_S)).id)
                urgent = admin.submit_yaml(job_spec("urgent", "red-live", RED_S, priority="urgent")).id
                every = [*ids["red"], *ids["blue"], urgent]
                leader.wait_ready(lambda every=every: all(admin.job(j).state in DONE for j in every), timeout_s=600)
                views = {team: [admin.job(j) for j in js] for team, js in ids.items()}
                assert all(v.state == "succeeded" for vs in views.values() for v in vs), [
                    (v.id, v.state, v.error) for vs in views.values() for v in vs
                ]
                shares = contended_share(views)
                urgent_start = run_of(admin.job(urgent))[0]
                normal_starts = sorted(run_of(v)[0] for vs in views.values() for v in vs)
                place = sum(start < urgent_start for start in normal_starts)
                print(
                    f"  live {name:7s} (lookahead {lookahead}): blue's share "
                    f"{shares['blue']:.2f} (weight 2 of 3: 0.67), red's {shares['red']:.2f}; the urgent job, submitted "
                    f"last, started after {place} of the {len(normal_starts)} normal jobs",
                    flush=True,
                )
                out[f"live_teams_{name}_blue_share"] = f"{shares['blue']:.2f}"
                out[f"live_teams_{name}_urgent_after"] = str(place)
                if lookahead == "0":
                    out["live_teams_quota_stop"] = _quota_stop(admin, teams)
                for client in teams.values():
                    client.close()
        finally:
            stack.close()
    return out


def _quota_stop(admin: BenchfleetClient, teams: dict[str, BenchfleetClient]) -> str:
    """Red's quota set below what it used today: its next job waits, saying why, while blue's runs."""
    admin.set_team("red", TeamSettings(weight=1.0, quota_hours_per_day={"*": 0.001}))
    late = teams["red"].submit_yaml(job_spec("red-late", "red-live", RED_S)).id
    blue = teams["blue"].submit_yaml(job_spec("blue-late", "blue-live", RED_S)).id
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and admin.job(blue).state not in DONE:
        time.sleep(0.5)
    waiting = admin.job(late)
    stopped = waiting.state == "queued" and "daily quota" in (waiting.waiting_reason or "")
    print(
        f"  live quota: red past its 0.001 h a day: its next job {waiting.state} ({waiting.waiting_reason}); blue's "
        f"{admin.job(blue).state}",
        flush=True,
    )
    admin.cancel(late)
    return str(stopped and admin.job(blue).state == "succeeded").lower()
