"""Teams scope what a user sees and changes: another team's jobs, models, data, results and baselines answer 404 as if
they did not exist, in the API and on the pages; admins see every team."""

from __future__ import annotations

import io
from typing import Any

import numpy as np
import pytest

from leader.auth.tokens import SESSION_COOKIE
from tests.integration.leader.analysis_seed import pct, seed_job
from tests.integration.leader.conftest import ADMIN, YAML, Leader
from tests.unit.leader.onnx_models import identity_model

TEAM = {"a": "alpha", "b": "beta"}
SPEC = (
    "name: {name}\nmodel: {model}\nbackends: [onnxruntime]\nbatch_sizes: [1]\n"
    "load: {{allow_short: true, rate: [10], duration: 2s}}\n"
)


def _token(leader: Leader, user: str, role: str, team: str | None) -> dict[str, str]:
    body: dict[str, Any] = {"user": user, "role": role}
    if team is not None:
        body["team"] = team
    made = leader.client.post("/api/v1/tokens", headers=ADMIN, json=body)
    assert made.status_code == 201, made.text
    assert made.json()["team"] == (team or "default")
    return {"Authorization": f"Bearer {made.json()['token']}"}


def _upload_model(leader: Leader, headers: dict[str, str], name: str, team: str | None = None) -> Any:
    form = {"name": name, "version": "1", **({"team": team} if team else {})}
    return leader.client.post("/api/v1/models", headers=headers, data=form,
                              files={"file": ("model.onnx", identity_model(), "application/octet-stream")})  # fmt: skip


def _upload_data(leader: Leader, headers: dict[str, str], name: str) -> Any:
    buf = io.BytesIO()
    np.savez(buf, x=np.zeros((4, 4), dtype=np.float32))
    return leader.client.post("/api/v1/data", headers=headers, data={"name": name, "format": "npz"},
                              files={"file": ("data.npz", buf.getvalue(), "application/octet-stream")})  # fmt: skip


def _metrics(backend: str, batch: int, rate: float) -> dict[str, Any]:
    return {"latency_ms": pct(3.0), "achieved_rate": rate}


@pytest.fixture
def teams(leader: Leader) -> dict[str, Any]:
    """Two teams with a submitter and a viewer each, a model, a data set and a finished job each."""
    who = {
        "a_sub": _token(leader, "ann", "submitter", "alpha"),
        "a_view": _token(leader, "abe", "viewer", "alpha"),
        "b_sub": _token(leader, "bob", "submitter", "beta"),
        "b_view": _token(leader, "bea", "viewer", "beta"),
    }
    assert _upload_model(leader, who["a_sub"], "alpha-m").status_code == 201
    made = _upload_model(leader, ADMIN, "beta-m", team="beta")  # an admin uploads for a team
    assert made.status_code == 201 and made.json()["team"] == "beta", made.text
    data = {t: _upload_data(leader, who[f"{t}_sub"], f"{t}-data") for t in ("a", "b")}
    assert all(d.status_code == 201 for d in data.values())
    jobs = {
        "a": seed_job(leader, name="alpha-job", model="alpha-m:1", backends=["onnxruntime"], batches=[1], rates=[10],
                      p99_slo=50, follower_id="host-a", metrics=_metrics),
        "b": seed_job(leader, name="beta-job", model="beta-m:1", backends=["onnxruntime"], batches=[1], rates=[10],
                      p99_slo=50, follower_id="host-b", metrics=_metrics),
    }  # fmt: skip
    return {"who": who, "jobs": jobs, "data": {t: d.json()["id"] for t, d in data.items()}}


def test_each_team_sees_only_its_own(leader: Leader, teams: dict[str, Any]) -> None:
    who, jobs, data = teams["who"], teams["jobs"], teams["data"]
    c = leader.client
    for me, other in (("a", "b"), ("b", "a")):
        h = who[f"{me}_view"]
        assert [j["id"] for j in c.get("/api/v1/jobs", headers=h).json()] == [jobs[me]]
        assert c.get(f"/api/v1/jobs/{jobs[me]}", headers=h).json()["team"] == TEAM[me]
        assert [m["name"] for m in c.get("/api/v1/models", headers=h).json()] == [f"{TEAM[me]}-m"]
        assert [d["id"] for d in c.get("/api/v1/data", headers=h).json()] == [data[me]]
        rows = c.get("/api/v1/leaderboard", headers=h).json()["rows"]
        assert [r["job_id"] for r in rows] == [jobs[me]] and rows[0]["team"] == TEAM[me]
        # Another team's things answer 404, exactly as unknown ones do.
        other_model = f"{TEAM[other]}-m"
        for url in (
            f"/api/v1/jobs/{jobs[other]}", f"/api/v1/jobs/{jobs[other]}/results", f"/api/v1/jobs/{jobs[other]}/progress",
            f"/api/v1/jobs/{jobs[other]}/export", f"/api/v1/jobs/{jobs[other]}/points/0/records",
            f"/api/v1/jobs/{jobs[other]}/points/0/records/export", f"/api/v1/jobs/{jobs[other]}/report.html",
            f"/api/v1/models/{other_model}/1", f"/api/v1/models/{other_model}/1/file", f"/api/v1/models/{other_model}/latest",
            f"/api/v1/data/{data[other]}", f"/api/v1/data/{data[other]}/file",
        ):  # fmt: skip
            answer = c.get(url, headers=h)
            assert answer.status_code == 404, (url, answer.status_code, answer.text)
        compared = c.get("/api/v1/compare", headers=h, params={"a": jobs[me], "b": jobs[other]})
        assert compared.status_code == 404 and compared.json()["field"] == "b", compared.text
        assert c.get("/api/v1/outliers", headers=h, params={"name": f"{TEAM[other]}-job"}).status_code == 404
    # Admins see every team.
    assert {j["id"] for j in c.get("/api/v1/jobs", headers=ADMIN).json()} == set(jobs.values())
    assert {r["team"] for r in c.get("/api/v1/leaderboard", headers=ADMIN).json()["rows"]} == {"alpha", "beta"}
    assert c.get("/api/v1/compare", headers=ADMIN, params={"a": jobs["a"], "b": jobs["b"]}).status_code == 200


def test_a_team_changes_only_its_own(leader: Leader, teams: dict[str, Any]) -> None:
    who, jobs, data = teams["who"], teams["jobs"], teams["data"]
    c = leader.client
    # Another team's model or data cannot be used: as if it did not exist, naming the field.
    used = c.post("/api/v1/jobs", headers={**who["a_sub"], **YAML}, content=SPEC.format(name="x", model="beta-m:1"))
    assert used.status_code == 404 and used.json()["field"] == "model.ref", used.text
    spec = SPEC.format(name="x", model="alpha-m:1") + f"data: {{source: upload, id: {data['b']}}}\n"
    used = c.post("/api/v1/jobs", headers={**who["a_sub"], **YAML}, content=spec)
    assert used.status_code == 422 and used.json()["field"] == "data.id", used.text
    # ... nor cancelled, deleted or pinned.
    assert c.post(f"/api/v1/jobs/{jobs['b']}/cancel", headers=who["a_sub"]).status_code == 404
    assert c.delete("/api/v1/models/beta-m/1", headers=who["a_sub"]).status_code == 404
    assert c.delete(f"/api/v1/data/{data['b']}", headers=who["a_sub"]).status_code == 404
    pinned = c.put("/api/v1/baselines/nightly", headers=who["a_sub"], json={"job_id": jobs["b"]})
    assert pinned.status_code == 404 and pinned.json()["field"] == "job_id", pinned.text
    # A submitter uploads only for its own team.
    wrong = _upload_model(leader, who["a_sub"], "sneaky", team="beta")
    assert wrong.status_code == 403 and wrong.json()["field"] == "team", wrong.text
    # Baselines are per team: the same name in two teams names two jobs.
    for me in ("a", "b"):
        pinned = c.put("/api/v1/baselines/nightly", headers=who[f"{me}_sub"], json={"job_id": jobs[me]})
        assert pinned.status_code == 200, pinned.text
    for me in ("a", "b"):
        compared = c.get("/api/v1/compare", headers=who[f"{me}_view"], params={"a": "baseline:nightly", "b": jobs[me]})
        assert compared.status_code == 200, compared.text
        assert compared.json()["points"][0]["verdict"] is not None
    # An admin names another team's baseline as team/name; a user cannot.
    assert c.get("/api/v1/compare", headers=ADMIN, params={"a": "baseline:beta/nightly", "b": jobs["b"]}).status_code == 200
    assert c.get("/api/v1/compare", headers=who["a_view"],
                 params={"a": "baseline:beta/nightly", "b": jobs["a"]}).status_code == 404  # fmt: skip
    # Its own team's model is used as before, and the job is the team's.
    ok = c.post("/api/v1/jobs", headers={**who["a_sub"], **YAML}, content=SPEC.format(name="ok", model="alpha-m:1"))
    assert ok.status_code == 201 and ok.json()["team"] == "alpha", ok.text


def test_pages_show_only_the_team(leader: Leader, teams: dict[str, Any]) -> None:
    jobs = teams["jobs"]
    made = leader.client.post("/api/v1/tokens", headers=ADMIN, json={"user": "pat", "role": "viewer", "team": "alpha"})
    login = leader.client.post("/login", data={"token": made.json()["token"], "next": "/leaderboard"},
                               follow_redirects=False)  # fmt: skip
    session = {SESSION_COOKIE: login.cookies[SESSION_COOKIE]}
    leader.client.cookies.clear()
    board = leader.client.get("/leaderboard", cookies=session)
    assert board.status_code == 200 and jobs["a"] in board.text and jobs["b"] not in board.text
    assert leader.client.get(f"/jobs/{jobs['a']}", cookies=session).status_code == 200
    for url in (f"/jobs/{jobs['b']}", f"/jobs/{jobs['b']}/points/0"):
        assert leader.client.get(url, cookies=session).status_code == 404, url
    compared = leader.client.get("/compare", cookies=session, params={"a": jobs["a"], "b": jobs["b"]})
    assert compared.status_code == 200 and f"job {jobs['b']} does not exist" in compared.text  # as for a job never made


def test_tokens_name_their_team(leader: Leader) -> None:
    bad = leader.client.post("/api/v1/tokens", headers=ADMIN, json={"user": "x", "role": "viewer", "team": "../up"})
    assert bad.status_code == 422 and "team" in bad.text
    listed = leader.client.get("/api/v1/tokens", headers=ADMIN).json()
    assert all("team" in t for t in listed)
