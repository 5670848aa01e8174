"""Fleet scheduling through the leader app: hardware constraints with a stated reason, drain and remove, cancel lists."""

from __future__ import annotations

import time
import uuid

from tests.integration.leader.conftest import ADMIN, Leader

GPU_SPEC = """\
name: needs-gpu
model: ident:1
backends: [onnxruntime]
load: {rate: 50, duration: 2s, warmup: 0s}
requires: {gpu: true, min_gpu_memory_mb: 16000}
"""


def fid() -> str:
    return f"f-{uuid.uuid4().hex[:10]}"


def test_gpu_job_is_never_placed_on_a_cpu_only_follower_and_says_why(leader: Leader) -> None:
    leader.upload_model()
    cpu_only = fid()
    leader.register(cpu_only)  # registers with gpus: [] (CPU-only, never faked)
    job = leader.submit(text=GPU_SPEC)
    cpu_job = leader.submit()
    leader.wait_dispatched(cpu_job["id"])
    waiting = leader.wait_for(job["id"], lambda j: j["waiting_reason"] is not None)
    assert waiting["state"] == "queued" and waiting["follower_id"] is None
    assert waiting["waiting_reason"] == "waiting: needs a GPU; no available follower has it"
    time.sleep(5 * leader.settings.place_interval_s)  # more placement ticks change nothing
    assert leader.job(job["id"])["state"] == "queued"
    assert all(h["state"] == "queued" for h in leader.job(job["id"])["history"])
    bad = leader.client.post(
        "/api/v1/jobs", headers={**ADMIN, "Content-Type": "application/yaml"}, content=GPU_SPEC.replace("16000", "-1")
    )
    assert bad.status_code == 422 and bad.json()["field"].startswith("requires.min_gpu_memory_mb")


def test_drain_requeues_held_jobs_and_takes_no_new_ones(leader: Leader) -> None:
    leader.upload_model()
    first = fid()
    leader.register(first)
    job = leader.submit()
    leader.wait_dispatched(job["id"])
    drained = leader.client.post(f"/api/v1/followers/{first}/drain", headers=ADMIN)
    assert drained.status_code == 200 and drained.json()["state"] == "draining"
    again = leader.wait_for(job["id"], lambda j: j["attempt"] == 2)
    assert any(f"follower {first} drained" in (h["reason"] or "") for h in again["history"])
    assert leader.job(job["id"])["state"] == "queued"  # the only follower is draining
    second = fid()
    leader.register(second)
    assert leader.wait_dispatched(job["id"], attempt=2)["follower_id"] == second
    assert leader.client.post("/api/v1/followers/nobody/drain", headers=ADMIN).status_code == 404
    assert leader.client.delete(f"/api/v1/followers/{second}", headers=ADMIN).status_code == 204
    requeued = leader.wait_for(job["id"], lambda j: j["attempt"] == 3)
    assert f"follower {second} removed by an admin" in requeued["history"][-1]["reason"]
    assert leader.client.delete(f"/api/v1/followers/{second}", headers=ADMIN).status_code == 404

