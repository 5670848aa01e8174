"""NVIDIA MPS for co-located GPU servers (follower/host/mps.py): the follower's control daemon starts, a CUDA process
joins it through the daemon's pipe directory with its thread share, the daemon quits when asked; and a co-location job
with `colocate.mps` serves two TorchScript models on the GPU at once through it.

Runs where an NVIDIA GPU, CUDA and `nvidia-cuda-mps-control` are present; skips with the reason elsewhere.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from common.spec.grid import expand
from common.spec.job import JobSpec
from common.spec.slo import SLO
from common.wire.models import ModelMeta
from common.wire.results import PointResult
from follower.host import hostinfo, mps
from follower.host import sandbox as sandboxes
from follower.host.sandbox import server_environment
from follower.point.colocate import run_colocated
from follower.point.context import ServerRun
from tests.integration.follower.test_runner import HOST

pytestmark = pytest.mark.integration
torch = pytest.importorskip("torch", reason="the torch extra is not installed (scripts/setup.sh installs it)")
MPS_OK, MPS_WHY = mps.available()
if not (torch.cuda.is_available() and hostinfo.gpus()):
    pytest.skip("no NVIDIA GPU with CUDA and NVML on this host", allow_module_level=True)
if not MPS_OK:
    pytest.skip(f"MPS cannot run here: {MPS_WHY}", allow_module_level=True)

CLIENT = "import torch; x = torch.ones(4096, device='cuda'); torch.cuda.synchronize(); print(int(x.sum().item()))"


def _control_daemons() -> list[psutil.Process]:
    return [p for p in psutil.process_iter(["name"]) if p.info["name"] == mps.CONTROL]


def _wait_gone(timeout_s: float = 20.0) -> list[psutil.Process]:
    deadline = time.monotonic() + timeout_s
    while (left := _control_daemons()) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


def _control_log(daemon: mps.MpsDaemon) -> str:
    path = daemon.log_dir / "control.log"
    return path.read_text(errors="replace") if path.exists() else ""


def test_a_cuda_process_joins_the_daemon_with_its_share_and_the_daemon_quits(tmp_path: Path) -> None:
    """The client runs as nobody, as a sandboxed server does: the MPS server the daemon starts for it runs as nobody on
    the host and must reach the daemon's directories (a work directory under root's pytest tree would refuse it)."""
    assert not _control_daemons(), "an MPS control daemon was already running"
    as_nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"] if os.geteuid() == 0 else []
    with mps.MpsDaemon(tmp_path) as daemon:
        assert _control_daemons(), "the control daemon did not start"
        home = daemon.home
        env = server_environment(daemon.client_env(40))
        done = subprocess.run(
            [*as_nobody, sys.executable, "-c", CLIENT], env=env, capture_output=True, text=True, timeout=120, check=False
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == "4096"
        env = server_environment(daemon.client_env(None))
        ask = subprocess.run(
            [mps.CONTROL], input="get_server_list\n", env=env, capture_output=True, text=True, timeout=30, check=False
        )
        log = _control_log(daemon)
        print(f"\nMPS control log:\n{log}\nget_server_list: {ask.stdout.strip()!r}")
    # The client reached the daemon (it started an MPS server for it): the control log records the new client.
    assert "NEW CLIENT" in log.upper(), log
    assert ask.returncode == 0 and ask.stdout.strip(), f"no MPS server was listed: {ask.stdout!r} {ask.stderr!r}"
    assert not _wait_gone(), "the control daemon did not quit when asked"
    # Its own directory is gone; its logs are kept in the work directory.
    assert home is not None and not home.exists() and "NEW CLIENT" in (tmp_path / "mps-log" / "control.log").read_text().upper()


def _wide(tmp_path: Path, name: str, seed: int) -> tuple[ModelMeta, Path]:
    from follower.convert.canonical import CanonicalSpec, generate, local_model

    bundle, meta = generate(CanonicalSpec("fc", depth=4, width=1024, input_size=512, seed=seed))
    path = tmp_path / f"{name}.zip"
    path.write_bytes(bundle)
    # Where this host cannot sandbox a server, TorchScript (the model's own code) runs only for a trusted model: the
    # models are ours, so they are marked trusted there, as an admin would; where it can, the servers are sandboxed.
    trusted = not sandboxes.support().ok
    return local_model(bundle, meta, name).model_copy(update={"trusted": trusted}), path


def test_two_torchscript_servers_share_the_gpu_through_mps(tmp_path: Path) -> None:
    models = [_wide(tmp_path, "mps-a", 1), _wide(tmp_path, "mps-b", 2)]
    spec = JobSpec.model_validate(
        {
            "name": "mps",
            "model": "mps-a:1",
            "backends": ["torchscript"],
            "batch_sizes": [8],
            "server": {"device": "cuda"},
            "slo": {"p99_ms": 10_000},
            "load": {"pattern": "poisson", "rate": 100, "duration": "3s", "warmup": "1s"},
            "colocate": {"models": ["mps-b:1"], "mps": True, "active_thread_percentage": [50, 50]},
        }
    )
    assert spec.colocate is not None and spec.requires.gpu
    colocate = spec.colocate
    run = ServerRun(
        model=models[0][0], model_path=models[0][1], workdir=tmp_path / "work", host_facts=HOST, slo=SLO(p99_ms=10_000)
    )

    async def measure() -> list[PointResult]:
        return [r async for r in run_colocated("torchscript", expand(spec), run, models=models, colocate=colocate)]

    results = {(r.point.served, tuple(r.point.beside)): r for r in asyncio.run(measure())}
    log = (run.workdir / "mps-log" / "control.log").read_text(errors="replace")
    print(f"\nMPS control log:\n{log}")
    assert sorted(results) == [(0, ()), (0, (1,)), (1, ()), (1, (0,))]
    for key, result in results.items():
        assert result.errors == 0 and result.ok == result.requests > 0, (key, result.error_sample)
        assert result.point.server.device == "cuda"
        lat = result.latency_ms
        assert lat is not None
        print(
            f"model {key[0]} beside {list(key[1])}: p50 {lat.p50:.2f} ms, p99 {lat.p99:.2f} ms, {result.achieved_rate:.1f} req/s"
        )
    # Every server (four starts: each model alone, then both at once) joined the job's daemon as an MPS client.
    assert log.upper().count("NEW CLIENT") >= 4, log
    assert not _wait_gone(), "the job's control daemon outlived the job"
