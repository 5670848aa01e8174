"""Job submission and queries: what is accepted is stored once, what is refused names its field and stores nothing."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator

import pytest

from leader.placement.placer import NO_FOLLOWER
from tests.integration.leader.conftest import ADMIN, SPEC_YAML, YAML, Leader


def test_submit_yaml_stores_a_queued_job(leader: Leader) -> None:
    leader.upload_model("ident", "1")
    job = leader.submit("ident:1")
    assert job["state"] == "queued"
    assert job["attempt"] == 1
    assert job["model_ref"] == "ident:1"
    assert job["points_total"] == 2 and job["points_done"] == 0
    assert job["estimate_s"] == pytest.approx(2 * 2.5 + 5.0)
    # At most: each 2 s point also waits its drain bound (its duration, at least 2 s) for a server that fell behind.
    assert job["estimate_max_s"] == pytest.approx(2 * 2.5 + 5.0 + 2 * 2.0)
    assert [h["state"] for h in job["history"]] == ["queued"]
    assert job["created_at"].endswith(("Z", "+00:00"))
    stored = leader.db.jobs.find_one({"_id": job["id"]})
    assert stored is not None and stored["state"] == "queued"
    assert [p["batch_size"] for p in stored["points"]] == [1, 8]
    # The placer may already have stated why it waits (a write, which moves updated_at), and a read adds its queue
    # position: the rest is as stored.
    read = leader.job(job["id"])
    volatile = ("waiting_reason", "queue_position", "estimated_start", "updated_at")
    assert {k: v for k, v in read.items() if k not in volatile} == {k: v for k, v in job.items() if k not in volatile}
    stated = read["waiting_reason"] is not None
    assert read["updated_at"] > job["updated_at"] if stated else read["updated_at"] == job["updated_at"], (read, job)


def test_submit_json_and_latest_model(leader: Leader) -> None:
    leader.upload_model("ident", "1")
    leader.upload_model("ident", "2")
    body = {"name": "j", "model": "ident", "load": {"rate": [10, 20], "allow_short": True}}
    response = leader.client.post("/api/v1/jobs", headers={**ADMIN, "Content-Type": "application/json"}, content=json.dumps(body))
    assert response.status_code == 201, response.text
    assert response.json()["model_ref"] == "ident:2"
    assert response.json()["points_total"] == 2


GOOD = SPEC_YAML.format(model="ident:1")


@pytest.mark.parametrize(
    ("body", "content_type", "status", "field"),
    [
        ("name: [unclosed\n", "application/yaml", 422, "(body)"),
        (GOOD.replace("rate: 50", "rate: fast"), "text/yaml", 422, "load.rate"),
        (GOOD.replace("rate: 50", "rate: -5"), "application/x-yaml", 422, "load.rate"),
        (GOOD + "colour: blue\n", "text/plain", 422, "colour"),
        (GOOD.replace("batch_sizes: [1, 8]", "batch_sizes: one"), "application/yaml", 422, "batch_sizes"),
        ("- just\n- a list\n", "application/yaml", 422, "(root)"),
        (GOOD.replace("ident:1", "nosuch:1"), "application/yaml", 404, "model.ref"),
        (GOOD.replace("ident:1", "ident:9"), "application/yaml", 404, "model.ref"),
        ('{"name": "x", ', "application/json", 422, "(body)"),
        (GOOD + "data: {source: sample_images, preprocess: resize}\n", "application/yaml", 422, "data.preprocess"),
        (GOOD + "data: {postprocess: argmax}\n", "application/yaml", 422, "data.postprocess"),
        (GOOD, "application/xml", 415, "Content-Type"),
        (GOOD, "", 415, "Content-Type"),
    ],
)
def test_bad_submissions_store_nothing(leader: Leader, body: str, content_type: str, status: int, field: str) -> None:
    leader.upload_model("ident", "1")
    before = leader.db.jobs.count_documents({})
    headers = {**ADMIN, "Content-Type": content_type} if content_type else ADMIN
    response = leader.client.post("/api/v1/jobs", headers=headers, content=body.encode())
    assert response.status_code == status, response.text
    error = response.json()
    assert error["field"] == field, error
    assert set(error) >= {"error", "message", "field"}
    assert leader.db.jobs.count_documents({}) == before


def test_oversized_body_is_413(make_leader: Callable[..., Leader]) -> None:
    leader = make_leader(max_body_bytes=2048)
    leader.upload_model()
    padded = GOOD + "#" + "x" * 4096 + "\n"
    response = leader.client.post("/api/v1/jobs", headers={**ADMIN, **YAML}, content=padded)
    assert response.status_code == 413
    assert response.json()["error"] == "payload_too_large"

    # No Content-Length (chunked): the limit is enforced while reading.
    def chunks() -> Iterator[bytes]:
        yield GOOD.encode()
        yield b"#" + b"x" * 4096 + b"\n"

    response = leader.client.post("/api/v1/jobs", headers={**ADMIN, **YAML}, content=chunks())
    assert response.status_code == 413
    assert leader.db.jobs.count_documents({}) == 0


def test_list_get_cancel(leader: Leader) -> None:
    leader.upload_model()
    first = leader.submit()
    second = leader.submit()
    listed = leader.client.get("/api/v1/jobs", headers=ADMIN).json()
    assert [j["id"] for j in listed] == [second["id"], first["id"]]
    assert len(leader.client.get("/api/v1/jobs?limit=1", headers=ADMIN).json()) == 1
    assert leader.client.get("/api/v1/jobs?limit=501", headers=ADMIN).status_code == 422

    cancelled = leader.client.post(f"/api/v1/jobs/{first['id']}/cancel", headers=ADMIN)
    assert cancelled.status_code == 200
    assert cancelled.json()["state"] == "cancelled"
    assert [h["state"] for h in cancelled.json()["history"]] == ["queued", "cancelled"]
    again = leader.client.post(f"/api/v1/jobs/{first['id']}/cancel", headers=ADMIN)
    assert again.status_code == 409

    queued = leader.client.get("/api/v1/jobs?state=queued", headers=ADMIN).json()
    assert [j["id"] for j in queued] == [second["id"]]
    bad_state = leader.client.get("/api/v1/jobs?state=sleeping", headers=ADMIN)
    assert bad_state.status_code == 422 and bad_state.json()["field"] == "query.state"

    missing = leader.client.get("/api/v1/jobs/nope", headers=ADMIN)
    assert missing.status_code == 404 and missing.json()["error"] == "not_found"
    assert leader.client.get("/api/v1/jobs/nope/results", headers=ADMIN).status_code == 404


def test_a_post_processor_the_models_outputs_cannot_feed_is_refused_naming_it(leader: Leader) -> None:
    """topk ranks a [batch, classes] float score output: a model with an integer, or a 4-D, output cannot feed it."""
    from onnx import TensorProto

    from tests.unit.leader.onnx_models import identity_model

    leader.upload_model("ints", "1", identity_model(elem_type=TensorProto.INT64))
    leader.upload_model("maps", "1", identity_model(dims=("batch", 3, 8, 8)))
    leader.upload_model("scores", "1", identity_model())
    for model in ("ints:1", "maps:1"):
        body = SPEC_YAML.format(model=model) + "data: {postprocess: topk}\n"
        response = leader.client.post("/api/v1/jobs", headers={**ADMIN, **YAML}, content=body)
        assert response.status_code == 422, response.text
        error = response.json()
        assert error["field"] == "data.postprocess" and "topk ranks a [batch, classes] float score output" in error["message"]
        assert f"{model} outputs y " in error["message"], error
    leader.submit(text=SPEC_YAML.format(model="scores:1") + "data: {postprocess: topk}\n")  # [batch, 4] FP32 feeds it


def test_a_unique_start_of_a_job_id_names_the_job_and_a_foreign_one_is_not_there(leader: Leader) -> None:
    """The console shows 8 characters of a job's id: any unique start of at least 4 works in the job routes (and so
    in the CLI, which calls them); one shared by two jobs is a 422 asking for more; another team's job is the same
    404 as an unknown one."""
    leader.upload_model()
    jobs = [leader.submit()["id"] for _ in range(3)]
    job = jobs[0]
    for path in ("", "/results", "/progress", "/footprint", "/export?format=json"):
        answer = leader.client.get(f"/api/v1/jobs/{job[:8]}{path}", headers=ADMIN)
        assert answer.status_code == 200, (path, answer.text)
    assert leader.client.get(f"/api/v1/jobs/{job[:8]}", headers=ADMIN).json()["id"] == job
    # A second job whose id shares the first 6 characters with this one's: 6 no longer name one, and say so; 7 do.
    twin = job[:6] + ("1" if job[6] == "0" else "0") + job[7:]
    leader.db.jobs.insert_one({**leader.db.jobs.find_one({"_id": jobs[1]}), "_id": twin})
    ambiguous = leader.client.get(f"/api/v1/jobs/{job[:6]}", headers=ADMIN)
    assert ambiguous.status_code == 400 and "more than one job" in ambiguous.json()["message"], ambiguous.text
    assert leader.client.get(f"/api/v1/jobs/{job[:7]}", headers=ADMIN).json()["id"] == job
    assert leader.client.get(f"/api/v1/jobs/{job[:3]}", headers=ADMIN).status_code == 404  # too short to name one
    cancelled = leader.client.post(f"/api/v1/jobs/{job[:8]}/cancel", headers=ADMIN)
    assert cancelled.status_code == 200 and cancelled.json()["id"] == job
    # Another team's viewer: the job is not there, short or whole, the same 404 as a job that never was.
    made = leader.client.post("/api/v1/tokens", headers=ADMIN, json={"user": "o", "role": "viewer", "team": "other"})
    other = {"Authorization": f"Bearer {made.json()['token']}"}
    for ref in (job, job[:8], "0" * 32):
        answer = leader.client.get(f"/api/v1/jobs/{ref}", headers=other)
        assert answer.status_code == 404 and answer.json()["message"] == f"job {ref} does not exist", answer.text


def test_a_job_no_follower_can_run_is_flagged_in_the_submission_reply(leader: Leader) -> None:
    """A backend no registered follower offers: the reply says why the job will wait (it once said nothing until the
    placer's next tick, and `submit` printed only the id); a job a follower can run carries no reason. The fleet it is
    judged on is kept a second (leader.placement.placer.FLEET_TTL_S), and read again at once after a registration."""
    leader.upload_model()
    alone = leader.submit(text=SPEC_YAML.format(model="ident:1"))  # (the fleet read and kept: nobody)
    assert alone["waiting_reason"] == NO_FOLLOWER, alone
    leader.register("f-onnx", backends=["onnxruntime"])
    waits = leader.submit(text=SPEC_YAML.format(model="ident:1").replace("onnxruntime", "tfserving"))
    assert waits["waiting_reason"] and "needs backends tfserving" in waits["waiting_reason"], waits
    assert leader.job(waits["id"])["waiting_reason"] == waits["waiting_reason"]  # stored, as the placer would
    runs = leader.submit(text=SPEC_YAML.format(model="ident:1"))
    assert runs["waiting_reason"] is None, runs
