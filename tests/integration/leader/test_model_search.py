"""The model repository's update and search against a real PerfDB: description and tags at upload and by update (the
owner or an admin; the trusted mark an admin's only), bad values a 422 naming the field; search by text, tags, format,
architecture and parameter count; the tags on the leaderboard's rows, kept up to date and filterable."""

from __future__ import annotations

from typing import Any

from benchfleet.generate.llmgen import LlamaSpec, generate
from tests.integration.leader.analysis_seed import pct, seed_job
from tests.integration.leader.conftest import ADMIN, Leader
from tests.unit.leader.onnx_models import identity_model


def _upload(leader: Leader, headers: dict[str, str], name: str, **form: str) -> Any:
    files = {"file": ("model.onnx", identity_model(), "application/octet-stream")}
    return leader.client.post("/api/v1/models", headers=headers, data={"name": name, "version": "1", **form}, files=files)


def _names(leader: Leader, **params: Any) -> list[str]:
    found = leader.client.get("/api/v1/models", headers=ADMIN, params=params)
    assert found.status_code == 200, found.text
    return sorted(m["name"] for m in found.json())


def test_models_are_described_tagged_updated_and_searched(leader: Leader) -> None:
    made = leader.client.post("/api/v1/tokens", headers=ADMIN, json={"user": "sue", "role": "submitter"}).json()
    sue = {"Authorization": f"Bearer {made['token']}"}
    other = leader.client.post("/api/v1/tokens", headers=ADMIN, json={"user": "bob", "role": "submitter"}).json()
    bob = {"Authorization": f"Bearer {other['token']}"}
    stored = _upload(leader, sue, "resnet-ish", description="An image classifier", tags="vision, prod,vision")
    assert stored.status_code == 201, stored.text
    assert stored.json()["tags"] == ["prod", "vision"] and stored.json()["description"] == "An image classifier"
    assert _upload(leader, sue, "plain").status_code == 201
    bad = _upload(leader, sue, "badly", tags="Not A Tag")
    assert bad.status_code == 422 and bad.json()["field"] == "tags"
    data, generated = generate(LlamaSpec(layers=2, hidden=64, heads=2, kv_heads=2, intermediate=128, vocab=1024, context=512))
    files = {"file": ("model.zip", data, "application/zip")}
    form = {"name": "tiny-llama", "version": "1", "format": "hf", "tags": "llm"}
    assert leader.client.post("/api/v1/models", headers=ADMIN, data=form, files=files).status_code == 201

    # Update: the owner changes description and tags; another submitter may not; the trusted mark is an admin's.
    changed = leader.client.patch("/api/v1/models/plain/1", headers=sue, json={"description": "Baseline", "tags": ["cpu"]})
    assert changed.status_code == 200 and changed.json()["tags"] == ["cpu"] and changed.json()["trusted"] is False
    theirs = leader.client.patch("/api/v1/models/plain/1", headers=bob, json={"tags": ["mine"]})
    assert theirs.status_code == 403 and theirs.json()["field"] == "owner"
    trusting = leader.client.patch("/api/v1/models/plain/1", headers=sue, json={"trusted": True})
    assert trusting.status_code == 403 and trusting.json()["field"] == "trusted"
    too_long = leader.client.patch("/api/v1/models/plain/1", headers=sue, json={"description": "x" * 501})
    assert too_long.status_code == 422 and too_long.json()["field"] == "body.description"
    unknown = leader.client.patch("/api/v1/models/plain/1", headers=sue, json={"name": "renamed"})
    assert unknown.status_code == 422
    assert leader.client.get("/api/v1/models/plain/1", headers=ADMIN).json()["description"] == "Baseline"

    # Search: every criterion given must hold.
    assert _names(leader) == ["plain", "resnet-ish", "tiny-llama"]
    assert _names(leader, tag="vision") == ["resnet-ish"]
    assert _names(leader, tag=["vision", "prod"]) == ["resnet-ish"] and _names(leader, tag=["vision", "cpu"]) == []
    assert _names(leader, q="CLASSIFIER") == ["resnet-ish"] and _names(leader, q="plain") == ["plain"]
    assert _names(leader, format="hf") == ["tiny-llama"] and _names(leader, format="onnx") == ["plain", "resnet-ish"]
    assert _names(leader, architecture="LlamaForCausalLM") == ["tiny-llama"]
    params = generated["parameters"]
    assert _names(leader, min_parameters=params) == ["tiny-llama"] and _names(leader, max_parameters=params - 1) == []
    wrong = leader.client.get("/api/v1/models", headers=ADMIN, params={"format": "pickle"})
    assert wrong.status_code == 422 and wrong.json()["field"] == "query.format"
    bad_tag = leader.client.get("/api/v1/models", headers=ADMIN, params={"tag": "Bad Tag"})
    assert bad_tag.status_code == 400 and bad_tag.json()["field"] == "tag"


def test_the_leaderboard_shows_the_model_tags_as_they_change(leader: Leader) -> None:
    assert _upload(leader, ADMIN, "ident", tags="vision").status_code == 201
    job_id = seed_job(
        leader,
        name="tagged",
        backends=["onnxruntime"],
        batches=[1],
        rates=[10.0],
        p99_slo=50.0,
        follower_id="host-a",
        metrics=lambda *_: {"latency_ms": pct(5.0)},
    )
    board = leader.client.get("/api/v1/leaderboard", headers=ADMIN, params={"filter": "tags:vision"}).json()
    assert [(r["job_id"], r["tags"]) for r in board["rows"]] == [(job_id, ["vision"])]
    assert leader.client.patch("/api/v1/models/ident/1", headers=ADMIN, json={"tags": ["prod", "cpu"]}).status_code == 200
    assert leader.client.get("/api/v1/leaderboard", headers=ADMIN, params={"filter": "tags:vision"}).json()["total"] == 0
    board = leader.client.get("/api/v1/leaderboard", headers=ADMIN, params={"filter": "tags:prod"}).json()
    assert [r["tags"] for r in board["rows"]] == [["cpu", "prod"]]
    untagged = leader.client.get("/api/v1/leaderboard", headers=ADMIN, params={"filter": "tags!=prod"}).json()
    assert untagged["total"] == 0
