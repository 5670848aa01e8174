"""A GPU job through the whole system: the follower registers its GPU via NVML, a job with `server.device: cuda` is
placed on it (the spec implies `requires.gpu`), TorchScript runs on the GPU and the stored result carries GPU power
and energy per request. Runs where an NVIDIA GPU with CUDA is present; skips with the reason elsewhere.
"""

from __future__ import annotations

import pytest

from follower.host import hostinfo
from tests.e2e.test_walking_skeleton import _wait_done

pytestmark = pytest.mark.e2e
torch = pytest.importorskip("torch", reason="the torch extra is not installed (scripts/setup.sh installs it)")
GPUS = hostinfo.gpus()
if not (torch.cuda.is_available() and GPUS):
    pytest.skip("no NVIDIA GPU with CUDA and NVML on this host", allow_module_level=True)


def test_gpu_job_is_placed_on_the_gpu_follower_and_measures_the_gpu(fleet) -> None:  # type: ignore[no-untyped-def]
    from follower.convert.canonical import CanonicalSpec, generate

    fleet.env["BENCHFLEET_FOLLOWER_METRICS_PORT"] = "-1"
    fleet.start_follower("gpu-e2e")
    bundle, _ = generate(CanonicalSpec("fc", depth=3, width=512, input_size=256))
    with fleet.client() as client:
        follower = next(f for f in client.followers() if f.info.follower_id == "gpu-e2e")
        assert [g.name for g in follower.info.gpus] == [g.name for g in GPUS]
        assert follower.info.gpus[0].memory_mb == GPUS[0].memory_mb
        ref = client.upload_model(bundle, name="gpu-e2e", version="1", format="bundle").ref
        job = client.submit_yaml(f"""
name: gpu-e2e
model: {ref}
backends: [torchscript]
batch_sizes: [8]
server: {{device: cuda}}
load: {{allow_short: true, pattern: poisson, rate: 100, duration: 2s, warmup: 0.5s}}
""")
        assert client.job(job.id).spec.requires.gpu  # implied by the GPU server: placement needs a GPU follower
        results = _wait_done(client, job.id, timeout_s=240)
        # The leaderboard names the GPU as the row's hardware (the roofline takes that device's ceiling from it).
        board = client.leaderboard(filters=[f"job_id:{job.id}"])
    (row,) = results.points
    assert row.errors == 0 and row.ok == row.requests > 0, row.error_sample
    assert row.point.server.device == "cuda"
    assert row.environment.follower_id == "gpu-e2e" and row.environment.gpus
    res = row.resources
    assert res is not None and res.gpu_power_w_mean is not None and res.gpu_power_w_mean > 10
    assert res.gpu_memory_mb_max is not None and res.gpu_memory_mb_max > 100
    assert res.energy_per_request_j is not None and res.energy_per_request_j > 0
    assert [r.hardware for r in board.rows] == [GPUS[0].name]
