"""The GPU-busy gate between points: a process that is not the follower's, found on a GPU as a point starts or ends,
invalidates that point with its name and pid; the points before it stand. NVML's process list is the seam (this host
has no GPU: tests/integration/gpu/test_gpu_paths.py starts a real CUDA process where one exists). Every result
carries its reproducibility record."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from common.spec.job import PointSpec
from common.wire.models import ModelMeta
from common.wire.results import PointResult
from follower.host.hostinfo import platform_record
from follower.point import drive
from follower.point.context import HostFacts, ServerRun
from follower.point.runner import run_backend

pytestmark = pytest.mark.integration


@pytest.fixture
def stranger() -> Iterator[subprocess.Popen[bytes]]:
    """A process of someone else's (not a child of the agent's under test: it stands for another user's job)."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


def test_a_foreign_gpu_process_invalidates_the_point_it_is_found_at_naming_it(
    mlp_meta: ModelMeta, mlp_path: Path, tmp_path: Path, stranger: subprocess.Popen[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[int] = []

    def nvml_processes() -> list[tuple[int, int, int]]:  # (gpu, pid, MiB), as NVML lists them: the stranger from point 1
        calls.append(len(calls))
        return [(0, stranger.pid, 512)] if len(calls) > 2 else []

    monkeypatch.setattr(drive, "foreign_gpu_processes", nvml_processes)
    load = {"pattern": "poisson", "rate": 100.0, "duration_s": 1.0, "warmup_s": 0.2}
    points = [
        PointSpec.model_validate({"index": k, "backend": "onnxruntime", "batch_size": 1, "seed": k, **load}) for k in range(2)
    ]
    host = HostFacts(follower_id="f", host="h", cpu_model="c", cpu_count=os.cpu_count() or 1, platform=platform_record())
    run = ServerRun(model=mlp_meta, model_path=mlp_path, workdir=tmp_path, host_facts=host, gpu_gate=True)

    async def measure() -> list[PointResult]:
        return [r async for r in run_backend("onnxruntime", points, run)]

    first, second = asyncio.run(measure())
    assert len(calls) == 4  # as each point starts and as it ends
    assert "gpu_foreign" not in [r.code for r in first.reasons]
    (reason,) = [r for r in second.reasons if r.code == "gpu_foreign"]
    name = psutil.Process(stranger.pid).name()
    assert not second.valid and f"{name} (pid {stranger.pid}) on GPU 0, 512 MiB" in reason.text, reason.text
    # The reproducibility record: the host's facts and a configuration hash per point (the two points differ only in
    # their place and seed: one configuration).
    env = first.environment
    assert env.kernel and env.os and env.packages.get("onnxruntime") and env.config_hash == second.environment.config_hash
    assert len(env.config_hash or "") == 64
