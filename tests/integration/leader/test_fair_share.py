"""Teams sharing the fleet, through a real leader (PerfDB, Redis, the placer in its background): with followers holding
no jobs back (`placement_lookahead: 0`) the leader's queue runs the team under its share first, urgent before normal
(admins only), a team alone takes what is free; admins set weights; the accounting sums follower- and GPU-hours by
team, user, follower class and follower with the configured prices, a user seeing only their team's."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from benchfleet import cli_teams
from benchfleet.cli import app as cli_app
from benchfleet.client import BenchfleetClient
from leader.placement import sharing as sharing_module
from tests.integration.leader.conftest import ADMIN, ADMIN_TOKEN, YAML, Leader, identity_model


def fid() -> str:
    return f"f-{uuid.uuid4().hex[:10]}"


def _model(leader: Leader, name: str, team: str) -> None:
    response = leader.client.post(
        "/api/v1/models",
        headers=ADMIN,
        data={"name": name, "version": "1", "team": team},
        files={"file": ("model.onnx", identity_model(), "application/octet-stream")},
    )
    assert response.status_code == 201, response.text


def _submit(leader: Leader, name: str, model: str, *, priority: str = "normal", headers: dict[str, str] = ADMIN) -> Any:
    spec = f"name: {name}\nmodel: {model}:1\nbackends: [onnxruntime]\n"
    spec += "load: {allow_short: true, rate: 50, duration: 2s, warmup: 0s}\n"
    return leader.client.post("/api/v1/jobs", headers={**headers, **YAML}, content=f"{spec}priority: {priority}\n")


def _job(leader: Leader, name: str, model: str, *, priority: str = "normal") -> str:
    response = _submit(leader, name, model, priority=priority)
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


def _as_follower(leader: Leader, follower: str, incarnation: str, job_id: str, path: str, body: dict[str, Any]) -> None:
    response = leader.client.post(
        f"/api/v1/jobs/{job_id}/{path}", headers=leader.as_follower(follower), json={"follower_id": follower, **body}
    )
    assert response.status_code == 200, response.text


def _run(leader: Leader, follower: str, incarnation: str, job_id: str, seconds: float) -> None:
    """Claim the dispatched job, hold the follower `seconds`, finish it: the run a follower would make."""
    leader.wait_dispatched(job_id)
    _as_follower(leader, follower, incarnation, job_id, "claim", {"attempt": 1, "incarnation": incarnation})
    time.sleep(seconds)  # the job's run: the follower time the team uses
    _as_follower(leader, follower, incarnation, job_id, "finish", {"attempt": 1, "state": "succeeded", "elapsed_s": seconds})


def _next(leader: Leader, waiting: list[str]) -> str:
    """The one of `waiting` the placer sends next (the follower has room for one)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        sent = [j for j in waiting if leader.job(j)["state"] == "assigned"]
        if sent:
            assert len(sent) == 1, sent
            return sent[0]
        time.sleep(0.05)
    raise AssertionError(f"none of {waiting} was placed")


class _Through:
    """The CLI's HTTP client: each request to the leader's app through the test's own client, with the CLI's token."""

    def __init__(self, leader: Leader, token: str) -> None:
        self.leader, self.token = leader, token

    def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        headers = {**kwargs.pop("headers", {}), "Authorization": f"Bearer {self.token}"}
        return self.leader.client.request(method, path, headers=headers, **kwargs)

    def close(self) -> None:
        """The test's client stays open for the rest of the test."""


def _token(leader: Leader, user: str, team: str) -> dict[str, str]:
    made = leader.client.post("/api/v1/tokens", headers=ADMIN, json={"user": user, "role": "submitter", "team": team})
    assert made.status_code in (200, 201), made.text
    return {"Authorization": f"Bearer {made.json()['token']}"}


def test_the_leaders_queue_runs_the_team_under_its_share_first_and_urgent_before_all(
    make_leader: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sharing_module, "USES_TTL_S", 0.0)  # the teams' use read every tick: the test sees each run at once
    leader = make_leader(placement_lookahead=0, prices={"cpu": 2.0, "*": 5.0})
    _model(leader, "red-model", "red")
    _model(leader, "blue-model", "blue")
    follower, incarnation = fid(), uuid.uuid4().hex
    leader.register(follower, incarnation)
    first = _job(leader, "red-0", "red-model")
    leader.wait_dispatched(first)
    # The follower holds one job (lookahead 0: only the one it runs): the rest wait in the leader's queue.
    red = [_job(leader, f"red-{i}", "red-model") for i in (1, 2)]
    blue = _job(leader, "blue-0", "blue-model")  # submitted last
    time.sleep(3 * leader.settings.place_interval_s)  # a few placement ticks: nothing more is sent
    assert all(leader.job(j)["state"] == "queued" for j in [*red, blue])
    _run(leader, follower, incarnation, first, 0.6)
    # Red used the follower, blue none, both contend: blue is under its share, so it runs next though it came last.
    assert _next(leader, [*red, blue]) == blue
    teams = {t["team"]: t for t in leader.client.get("/api/v1/teams", headers=ADMIN).json()}
    assert teams["red"]["active"] and teams["blue"]["active"] and teams["red"]["fair_share"] == 0.5
    assert teams["red"]["used_s"] >= 0.6 and teams["red"]["use_share"] > 0.5
    # An admin's urgent job, submitted while blue's runs, goes before the normal ones waiting longer (submitted after
    # blue's finished, it would race the placement of the next normal job); a submitter may not ask for urgent.
    leader.wait_dispatched(blue)
    _as_follower(leader, follower, incarnation, blue, "claim", {"attempt": 1, "incarnation": incarnation})
    urgent = _job(leader, "red-urgent", "red-model", priority="urgent")
    _as_follower(leader, follower, incarnation, blue, "finish", {"attempt": 1, "state": "succeeded", "elapsed_s": 0.1})
    assert _next(leader, [*red, urgent]) == urgent
    refused = _submit(leader, "blue-urgent", "blue-model", priority="urgent", headers=_token(leader, "bob", "blue"))
    assert refused.status_code == 403 and refused.json()["field"] == "priority"
    _run(leader, follower, incarnation, urgent, 0.1)
    # Red alone now: it takes the free follower, whatever its share.
    second = _next(leader, red)
    _run(leader, follower, incarnation, second, 0.1)

    # The accounting: every run, by team, with its cost at the price of its follower's class (cpu: 2 per hour).
    report = leader.client.get("/api/v1/usage", headers=ADMIN, params={"by": "team"}).json()
    rows = {r["key"]: r for r in report["rows"]}
    assert set(rows) == {"red", "blue"} and rows["red"]["attempts"] == 3 and rows["blue"]["attempts"] == 1
    assert rows["red"]["follower_hours"] * 3600 >= 0.8 and rows["red"]["gpu_hours"] == 0.0
    assert rows["red"]["cost"] == pytest.approx(2.0 * rows["red"]["follower_hours"], rel=1e-3)
    assert report["total"]["follower_hours"] == pytest.approx(sum(r["follower_hours"] for r in rows.values()), rel=1e-6)
    by_follower = leader.client.get("/api/v1/usage", headers=ADMIN, params={"by": "follower_class"}).json()
    assert [r["key"] for r in by_follower["rows"]] == ["cpu"] and by_follower["total"]["attempts"] == 4
    by_user = leader.client.get("/api/v1/usage", headers=ADMIN, params={"by": "user"}).json()
    assert [r["key"] for r in by_user["rows"]] == ["admin"]
    # A user sees their own team's use only.
    mine = leader.client.get("/api/v1/usage", headers=_token(leader, "rita", "red")).json()
    assert [r["key"] for r in mine["rows"]] == ["red"]
    backwards = {"since": "2026-01-02T00:00:00Z", "until": "2026-01-01T00:00:00Z"}
    bad = leader.client.get("/api/v1/usage", headers=ADMIN, params=backwards)
    assert bad.status_code == 400 and bad.json()["field"] == "since"

    # The console's fleet page shows the teams' use (an admin: every team's).
    assert leader.client.post("/login", data={"token": ADMIN_TOKEN, "next": "/fleet"}, follow_redirects=False).status_code == 303
    fleet = leader.client.get("/fleet").text
    table = fleet[fleet.index('id="fleet-usage"') :]
    assert "<td>red</td><td>3</td>" in table and "<td>blue</td><td>1</td>" in table and "USD" in table

    # The CLI reads the same, from the leader's app in this process (its HTTP client swapped at the transport seam).
    def client_for(url: str, token: str) -> BenchfleetClient:
        client = BenchfleetClient("http://testserver", token)
        client._http.close()
        client._http = _Through(leader, token)  # type: ignore[assignment]
        return client

    monkeypatch.setattr(cli_teams, "client_for", client_for)
    shown = CliRunner().invoke(cli_app, ["usage", "--by", "team", "--token", ADMIN_TOKEN], env={"COLUMNS": "100"})
    assert shown.exit_code == 0, shown.output
    red_line = next(line for line in shown.output.splitlines() if line.lstrip("│ ").startswith("red"))
    assert "3" in red_line and "USD" in red_line
    listed = CliRunner().invoke(cli_app, ["teams", "ls", "--json", "--token", ADMIN_TOKEN])
    assert listed.exit_code == 0 and {t["team"] for t in json.loads(listed.output)} >= {"red", "blue"}


def test_the_leaders_queue_orders_by_the_estimate_learned_from_a_kinds_history(
    make_leader: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sharing_module, "USES_TTL_S", 0.0)  # the learned corrections read every tick
    leader = make_leader(placement_lookahead=0)
    _model(leader, "slow-model", "red")
    _model(leader, "quick-model", "red")
    follower, incarnation = fid(), uuid.uuid4().hex
    leader.register(follower, incarnation)

    def claim(job_id: str) -> None:
        leader.wait_dispatched(job_id)
        _as_follower(leader, follower, incarnation, job_id, "claim", {"attempt": 1, "incarnation": incarnation})

    def finish(job_id: str, elapsed_s: float) -> None:
        """The run took `elapsed_s` as the follower reports it (no need to wait that long here)."""
        done = {"attempt": 1, "state": "succeeded", "elapsed_s": elapsed_s}
        _as_follower(leader, follower, incarnation, job_id, "finish", done)

    first = _job(leader, "slow-0", "slow-model")  # the same spec as the quick model's jobs, twenty times as long
    claim(first)
    finish(first, 40.0)
    blocker = _job(leader, "slow-1", "slow-model")
    claim(blocker)
    slow, quick = _job(leader, "slow-2", "slow-model"), _job(leader, "quick-0", "quick-model")  # equal spec estimates
    finish(blocker, 40.0)
    # First come first served (or the spec's estimates, tied) would send the slow one; its history says 40 s.
    assert _next(leader, [slow, quick]) == quick


def test_admins_set_team_weights(leader: Leader) -> None:
    put = leader.client.put("/api/v1/teams/blue", headers=ADMIN, json={"weight": 3})
    assert put.status_code == 200 and put.json()["weight"] == 3.0
    assert {t["team"]: t["weight"] for t in leader.client.get("/api/v1/teams", headers=ADMIN).json()}["blue"] == 3.0
    zero = leader.client.put("/api/v1/teams/blue", headers=ADMIN, json={"weight": 0})
    assert zero.status_code == 422 and "weight" in zero.text
    user = _token(leader, "bob", "blue")
    assert leader.client.put("/api/v1/teams/blue", headers=user, json={"weight": 9}).status_code == 403
    assert [t["team"] for t in leader.client.get("/api/v1/teams", headers=user).json()] == ["blue"]


def test_a_team_past_its_daily_quota_waits_saying_why_and_others_go_on(make_leader: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sharing_module, "USES_TTL_S", 0.0)
    leader = make_leader()  # the default lookahead (one job held beside the running one): quotas hold there too
    _model(leader, "red-model", "red")
    _model(leader, "blue-model", "blue")
    follower, incarnation = fid(), uuid.uuid4().hex
    leader.register(follower, incarnation)
    quota = {"weight": 1, "quota_hours_per_day": {"cpu": 0.0001}}  # 0.36 s of a cpu follower a day
    assert leader.client.put("/api/v1/teams/red", headers=ADMIN, json=quota).status_code == 200
    first = _job(leader, "red-0", "red-model")
    _run(leader, follower, incarnation, first, 0.6)
    late = _job(leader, "red-1", "red-model")
    waiting = leader.wait_for(late, lambda j: "daily quota" in (j["waiting_reason"] or ""))
    reason = waiting["waiting_reason"]
    assert waiting["state"] == "queued" and "0.0001 h on cpu" in reason and "00:00 UTC" in reason
    blue = _job(leader, "blue-0", "blue-model")  # another team is not held back
    leader.wait_dispatched(blue)
    assert leader.job(late)["state"] == "queued"
    red = next(t for t in leader.client.get("/api/v1/teams", headers=ADMIN).json() if t["team"] == "red")
    assert red["quota_hours_per_day"] == {"cpu": 0.0001} and red["used_today_hours"]["cpu"] * 3600 >= 0.6
    # More hours: the job goes.
    assert leader.client.put("/api/v1/teams/red", headers=ADMIN, json={"quota_hours_per_day": {"*": 5}}).status_code == 200
    leader.wait_dispatched(late)
    for bad in ({"quota_hours_per_day": {"cpu": -1}}, {"quota_hours_per_day": {"a/b": 1}}, {"weight": 1, "surprise": 2}):
        refused = leader.client.put("/api/v1/teams/red", headers=ADMIN, json=bad)
        assert refused.status_code == 422, (bad, refused.text)


def test_edges_of_the_period_and_class_names_with_dots(leader: Leader) -> None:
    """What a fuzzer sends: the first day of year 1 as the end of a period is 400 naming it, not an overflow; a class
    named like an instance type (dots) is kept as it is."""
    early = leader.client.get("/api/v1/usage", headers=ADMIN, params={"until": "0001-01-01T00:00:00Z"})
    assert early.status_code == 400 and early.json()["field"] == "until", early.text
    late = leader.client.get("/api/v1/usage", headers=ADMIN, params={"since": "9999-12-31T00:00:00Z"})
    assert late.status_code == 400 and late.json()["field"] == "since", late.text
    put = leader.client.put("/api/v1/teams/red", headers=ADMIN, json={"quota_hours_per_day": {"g5.xlarge": 2, "*": 1}})
    assert put.status_code == 200, put.text
    assert put.json()["quota_hours_per_day"] == {"g5.xlarge": 2.0, "*": 1.0}


def test_a_team_with_no_hours_on_any_class_waits_saying_so(leader: Leader) -> None:
    _model(leader, "green-model", "green")
    leader.register(fid(), uuid.uuid4().hex)
    assert leader.client.put("/api/v1/teams/green", headers=ADMIN, json={"quota_hours_per_day": {"*": 0}}).status_code == 200
    job = _job(leader, "green-0", "green-model")
    waiting = leader.wait_for(job, lambda j: "daily quota" in (j["waiting_reason"] or ""))
    assert waiting["state"] == "queued" and "0.00 of 0 h on *" in waiting["waiting_reason"]
