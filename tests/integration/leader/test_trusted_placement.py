"""A job whose server would run its model's code goes only to a follower that sandboxes it, unless the model is trusted."""

from __future__ import annotations

import time
import uuid

from tests.integration.leader.conftest import ADMIN, FOLLOWER, SPEC_YAML, Leader, follower_info
from tests.integration.leader.test_scheduling import fid


def _register_unsandboxed(leader: Leader, follower_id: str) -> None:
    """An agent on a host without the sandbox: it runs TorchScript only for trusted models."""
    info = {**follower_info(follower_id, uuid.uuid4().hex, ["onnxruntime"]), "trusted_only": ["torchscript"]}
    answer = leader.client.post("/api/v1/followers/register", headers=FOLLOWER, json=info)
    assert answer.status_code == 200, answer.text


def test_an_untrusted_models_torchscript_job_waits_for_a_sandbox_and_a_trusted_one_runs(leader: Leader) -> None:
    leader.upload_model()
    unsandboxed = fid()
    _register_unsandboxed(leader, unsandboxed)
    job = leader.submit(text=SPEC_YAML.format(model="ident:1").replace("backends: [onnxruntime]", "backends: [torchscript]"))
    deadline = time.monotonic() + 10
    while "sandboxes torchscript" not in (leader.job(job["id"]).get("waiting_reason") or ""):
        assert time.monotonic() < deadline, leader.job(job["id"])
        time.sleep(0.05)
    view = leader.job(job["id"])
    assert view["state"] == "queued" and "or the model marked trusted" in view["waiting_reason"]

    marked = leader.client.patch("/api/v1/models/ident/1", headers=ADMIN, json={"trusted": True})
    assert marked.status_code == 200
    placed = leader.wait_dispatched(job["id"])  # the mark reaches the queued job: now the unsandboxed follower may run it
    assert placed["follower_id"] == unsandboxed


def test_a_sandboxing_follower_takes_an_untrusted_models_torchscript_job(leader: Leader) -> None:
    leader.upload_model()
    sandboxed = fid()
    leader.register(sandboxed, backends=["onnxruntime", "torchscript"])
    job = leader.submit(text=SPEC_YAML.format(model="ident:1").replace("backends: [onnxruntime]", "backends: [torchscript]"))
    assert leader.wait_dispatched(job["id"])["follower_id"] == sandboxed
