"""Teams sharing a real fleet: a leader as it ships (its queue in the fair order, `placement_lookahead` 1), two real
followers, two teams and an admin. Both teams first use the fleet; then, with the followers drained, red queues many
short jobs, blue a few longer ones and the admin an urgent job last, and the leader's queue is read as the job pages
show it (each job's place) at two weights of blue's, chosen against the use the leader itself recorded: the team the
rule (common/fairshare.py `standing`, replayed on the leader's own figures) puts within its share runs first, all of
its jobs before any of the other's, whichever submitted first and however short the other's jobs; the urgent job
first of all. Then the followers resume, every job succeeds and the urgent job starts first on its follower; then red's
daily quota used up: its next job waits, saying why, while blue's runs.

Asserted on what the order decides, not on how long jobs took: the share of follower time blue got while both teams'
work ran on the fleet depends on how long each job's start took on the host, and is measured by bench/scheduler.py's
live part 5 (bench/scheduler_live_teams.py: blue's share 0.74-0.78 with the fair order, 0.27-0.28 without) and, with
a clock of its own, by its simulated parts."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest

from bench.scheduler_live_teams import job_spec, run_of
from benchfleet.client import BenchfleetClient
from benchfleet.generate.modelgen import mlp_onnx
from benchfleet.stack import LocalStack
from common.fairshare import TeamUse, standing
from common.wire.teams import TeamSettings
from tests.e2e.test_walking_skeleton import _wait_until

pytestmark = pytest.mark.e2e

FOLLOWERS = 2
RED_JOBS, RED_S, BLUE_JOBS, BLUE_S = 6, 1.0, 3, 3.0
DONE = ("succeeded", "failed", "cancelled")


@pytest.fixture(scope="module")
def shared(mongo_service, redis_service, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:  # type: ignore[no-untyped-def]
    env = {
        "BENCHFLEET_FOLLOWER_HEARTBEAT_INTERVAL_S": "0.5",
        "BENCHFLEET_FOLLOWER_METRICS_PORT": "-1",
    }
    base_env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": os.environ.get("PYTHONPATH", "")}
    stack = LocalStack(
        tmp_path_factory.mktemp("teams"),
        mongo_uri=mongo_service.url,
        redis_url=redis_service.url,
        db_name=f"e2e_teams_{uuid.uuid4().hex[:8]}",
        base_env=base_env,
        env=env,
    )
    with stack:
        stack.start_leader()
        yield stack


def _run_all(admin: BenchfleetClient, ids: list[str]) -> None:
    _wait_until(lambda: all(admin.job(j).state in DONE for j in ids), 300, "every job to end")
    ended = [(v.name, v.state, v.error) for v in (admin.job(j) for j in ids)]
    assert all(state == "succeeded" for _, state, _ in ended), ended


def _uses(admin: BenchfleetClient) -> dict[str, TeamUse]:
    """The teams' standing as the leader reports it: weight, follower seconds in the window, whether it contends."""
    return {t.team: TeamUse(t.weight, t.used_s, t.active) for t in admin.teams() if t.team}


@pytest.mark.timeout(420)
def test_the_queue_runs_the_team_within_its_weighted_share_first_urgent_before_all_and_stops_at_a_quota(
    shared: LocalStack,
) -> None:
    with shared.client() as admin:
        teams = {}
        for team in ("red", "blue"):
            teams[team] = BenchfleetClient(shared.url, admin.create_token(f"{team}-user", "submitter", team=team).token)
            teams[team].upload_model(mlp_onnx(), name=f"{team}-m", version="1")
        fleet = [f"teams-{i}" for i in range(FOLLOWERS)]
        for follower in fleet:
            shared.start_follower(follower, ready=lambda view: view.state == "ready")

        # Both teams use the fleet, so that each has follower time in the window.
        _run_all(admin, [teams[team].submit_yaml(job_spec(f"{team}-first", f"{team}-m", RED_S)).id for team in ("red", "blue")])

        for follower in fleet:
            admin.follower_action(follower, "drain")
        ids: dict[str, list[str]] = {"red": [], "blue": []}
        for i in range(RED_JOBS):  # interleaved, red first
            ids["red"].append(teams["red"].submit_yaml(job_spec(f"red-{i}", "red-m", RED_S)).id)
            if i < BLUE_JOBS:
                ids["blue"].append(teams["blue"].submit_yaml(job_spec(f"blue-{i}", "blue-m", BLUE_S)).id)
        urgent = admin.submit_yaml(job_spec("urgent", "red-m", RED_S, priority="urgent")).id

        # Blue's part of what the two teams used, as the leader counts it; blue's weight set so that its fair share
        # is well above that part (3 x its odds: red past its share by 2x blue's part), then well below it (a third
        # of its odds: blue past its share by 2x red's part).
        admin.set_team("blue", TeamSettings(weight=1.0))  # read afresh: the leader keeps its read of the window for seconds
        used = {team: use.used_s for team, use in _uses(admin).items() if team in ids}
        assert used["red"] > 0 and used["blue"] > 0, used
        part = used["blue"] / (used["red"] + used["blue"])
        for first, weight in (("blue", 3 * part / (1 - part)), ("red", part / (3 * (1 - part)))):
            admin.set_team("blue", TeamSettings(weight=weight))
            uses = _uses(admin)
            assert uses["red"].active and uses["blue"].active, uses
            then = "red" if first == "blue" else "blue"
            # The rule, on the leader's own figures: `first` within its share, the other past it.
            assert (standing(first, uses), standing(then, uses)) == (0, 2), (first, weight, uses)
            place = {j: admin.job(j).queue_position for j in [urgent, *ids["red"], *ids["blue"]]}
            assert place[urgent] == 1, place
            assert max(place[j] for j in ids[first]) < min(place[j] for j in ids[then]), (first, weight, place)

        for follower in fleet:
            admin.follower_action(follower, "resume")
        every = [*ids["red"], *ids["blue"], urgent]
        _run_all(admin, every)
        # Placed first, the urgent job ran first on its follower: at most the other followers' first jobs started
        # before it.
        urgent_start = run_of(admin.job(urgent))[0]
        before = sum(run_of(admin.job(j))[0] < urgent_start for j in every if j != urgent)
        assert before <= FOLLOWERS - 1, (before, urgent_start)

        # Red past its daily quota: its next job waits, saying why, while blue's runs.
        admin.set_team("red", TeamSettings(weight=1.0, quota_hours_per_day={"*": 0.001}))
        late = teams["red"].submit_yaml(job_spec("red-late", "red-m", RED_S)).id
        blue = teams["blue"].submit_yaml(job_spec("blue-late", "blue-m", RED_S)).id
        _wait_until(lambda: admin.job(blue).state in DONE, 120, "blue's job to end")
        assert admin.job(blue).state == "succeeded"
        waiting = admin.job(late)
        assert waiting.state == "queued" and "daily quota" in (waiting.waiting_reason or ""), waiting
        admin.cancel(late)
        for client in teams.values():
            client.close()
