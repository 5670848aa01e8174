"""GPU paths: NVML host facts, TorchScript and onnxruntime on CUDA with GPU power sampled, and no silent CPU fallback.

The GPU tests run where an NVIDIA GPU and CUDA are present (they skip with the reason elsewhere); the fallback tests
run where CUDA is absent and check that a GPU configuration fails loudly instead of quietly measuring the CPU.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import httpx
import numpy as np
import pytest

from common.spec.grid import expand
from common.spec.parse import parse_spec
from common.spec.server import ServerOptions
from common.wire.models import ModelMeta
from follower.backends import get_backend
from follower.backends.artifacts import artifact
from follower.backends.triton import find_triton, why_no_triton
from follower.host import hostinfo
from follower.host.sampler import SamplerConfig
from follower.point.context import HostFacts, ServerRun
from follower.point.runner import run_backend
from follower.protocols import infer_url

pytestmark = pytest.mark.integration
torch = pytest.importorskip("torch", reason="the torch extra is not installed (scripts/setup.sh installs it)")
import onnxruntime as ort  # noqa: E402  (after the skip: torch is what the fixture needs first)

CUDA = torch.cuda.is_available()
GPUS = hostinfo.gpus()
needs_gpu = pytest.mark.skipif(not (CUDA and GPUS), reason="no NVIDIA GPU with CUDA and NVML on this host")


@pytest.fixture(scope="module")
def wide(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, ModelMeta]:
    """A canonical fully connected model wide enough that a GPU does measurable work per request."""
    from follower.convert.canonical import CanonicalSpec, generate, local_model

    bundle, meta = generate(CanonicalSpec("fc", depth=4, width=1024, input_size=512))
    path = tmp_path_factory.mktemp("wide") / "wide.zip"
    path.write_bytes(bundle)
    model = local_model(bundle, meta, "wide")
    return path, model


def _infer(url: str, model: ModelMeta, x: np.ndarray) -> np.ndarray:
    """One KServe v2 JSON request; the first output as an array."""
    body = {"inputs": [{"name": model.inputs[0].name, "shape": list(x.shape), "datatype": "FP32",
                        "data": x.ravel().tolist()}]}  # fmt: skip
    reply = httpx.post(url, json=body, timeout=30.0)
    assert reply.status_code == 200, reply.text
    out = reply.json()["outputs"][0]
    return np.asarray(out["data"], dtype=np.float32).reshape(out["shape"])


def _reference(wide: tuple[Path, ModelMeta], workdir: Path, x: np.ndarray) -> np.ndarray:
    path, model = wide
    module = torch.jit.load(str(artifact(path, model, "torchscript", workdir)), map_location="cpu").eval()
    with torch.inference_mode():
        out = module(torch.from_numpy(x))
    return (out[0] if isinstance(out, tuple | list) else out).numpy()


@needs_gpu
def test_nvml_reports_the_gpus() -> None:
    gpu = GPUS[0]
    assert gpu.name and gpu.memory_mb > 1024 and gpu.uuid.startswith("GPU-")
    assert torch.cuda.get_device_name(0) in gpu.name or gpu.name in torch.cuda.get_device_name(0)


@needs_gpu
@pytest.mark.parametrize("backend", ["torchscript", "onnxruntime", "triton"])
def test_model_on_cuda_answers_like_the_cpu_reference(backend: str, wide: tuple[Path, ModelMeta], tmp_path: Path) -> None:
    """The model on the GPU (Triton: KIND_GPU instances on it) answers as the CPU reference does."""
    if backend == "onnxruntime" and "CUDAExecutionProvider" not in ort.get_available_providers():
        pytest.skip(f"onnxruntime {ort.__version__} here has no CUDAExecutionProvider (a CPU-only wheel)")
    if backend == "triton" and find_triton() is None:
        pytest.skip(f"no Triton here: {why_no_triton()}")
    path, model = wide
    server = get_backend(backend, server=ServerOptions(device="cuda:0"))
    server.start(path, model, tmp_path)
    try:
        server.wait_ready(120.0)
        x = np.random.default_rng(0).standard_normal((4, *model.inputs[0].shape[1:])).astype(np.float32)
        got = _infer(infer_url(server.serves(model)), model, x)
    finally:
        server.stop()
    # TF32/cuBLAS on the GPU against float32 on the CPU: close, not bit-equal.
    np.testing.assert_allclose(got, _reference(wide, tmp_path, x), rtol=2e-2, atol=2e-3)


@needs_gpu
def test_torchscript_point_on_cuda_samples_gpu_power_and_energy(wide: tuple[Path, ModelMeta], tmp_path: Path) -> None:
    path, model = wide
    spec = parse_spec(
        {
            "name": "gpu",
            "model": "wide:1",
            "backends": ["torchscript"],
            "batch_sizes": [8],
            "load": {"rate": 200, "duration": 3.0, "warmup": 1.0},
            "server": {"device": "cuda"},
        }
    )
    assert spec.requires.gpu  # a GPU server implies a GPU follower
    facts = HostFacts(
        follower_id="f-gpu",
        host="gpuhost",
        cpu_model=hostinfo.cpu_model(),
        cpu_count=os.cpu_count() or 1,
        gpus=tuple(g.name for g in GPUS),
    )

    async def collect() -> list:
        return [
            r
            async for r in run_backend(
                "torchscript",
                expand(spec),
                ServerRun(
                    model=model,
                    model_path=path,
                    workdir=tmp_path,
                    host_facts=facts,
                    slo=None,
                    sampling=SamplerConfig(grid_g_co2_per_kwh=400.0),
                ),
            )
        ]

    (result,) = asyncio.run(collect())
    assert result.errors == 0 and result.ok == result.requests > 0, result.error_sample
    assert result.point.server.device == "cuda"
    res = result.resources
    assert res is not None and res.samples >= 10
    assert res.gpu_util_percent_mean is not None and 0 <= res.gpu_util_percent_mean <= 100
    # The server holds the model and CUDA context on the GPU: device memory in use is well above zero.
    assert res.gpu_memory_mb_max is not None and res.gpu_memory_mb_max > 100
    assert res.gpu_power_w_mean is not None and res.gpu_power_w_mean > 10  # an H100 idles near 70 W
    assert res.energy_j is not None and res.energy_j > 0
    assert res.energy_per_request_j == pytest.approx(res.energy_j / result.ok, rel=0.05)
    assert res.co2_g_per_1m_requests is not None and res.co2_g_per_1m_requests > 0


@pytest.mark.parametrize(
    ("backend", "missing", "why_skip"),
    [
        ("torchscript", "CUDA is not available", "CUDA is available here: the no-fallback path cannot be provoked"),
        ("onnxruntime", "CUDAExecutionProvider is not available", "this onnxruntime has CUDAExecutionProvider"),
    ],
)
def test_gpu_server_without_cuda_fails_instead_of_using_the_cpu(
    backend: str, missing: str, why_skip: str, wide: tuple[Path, ModelMeta], tmp_path: Path
) -> None:
    if CUDA if backend == "torchscript" else "CUDAExecutionProvider" in ort.get_available_providers():
        pytest.skip(why_skip)
    path, model = wide
    server = get_backend(backend, server=ServerOptions(device="cuda"))
    server.start(path, model, tmp_path)
    try:
        with pytest.raises(RuntimeError) as failure:
            server.wait_ready(120.0)
    finally:
        server.stop()
    assert missing in str(failure.value) + (tmp_path / f"{backend}.log").read_text()


@needs_gpu
def test_cpu_point_on_a_gpu_host_reports_no_gpu_energy(wide: tuple[Path, ModelMeta], tmp_path: Path) -> None:
    """The idle card's power is not the energy of requests served on the CPU: GPU figures are absent, not charged."""
    path, model = wide
    spec = parse_spec(
        {"name": "cpu", "model": "wide:1", "backends": ["onnxruntime"], "load": {"rate": 50, "duration": 1.0, "warmup": 0.2}}
    )

    async def collect() -> list:
        return [
            r
            async for r in run_backend(
                "onnxruntime",
                expand(spec),
                ServerRun(
                    model=model,
                    model_path=path,
                    workdir=tmp_path,
                    slo=None,
                    sampling=SamplerConfig(grid_g_co2_per_kwh=400.0),
                ),
            )
        ]

    (result,) = asyncio.run(collect())
    res = result.resources
    assert result.ok > 0 and res is not None and res.server_cpu_percent_mean is not None
    assert res.gpu_power_w_mean is None and res.gpu_util_percent_mean is None and res.energy_j is None


@needs_gpu
def test_follower_metrics_export_the_gpus() -> None:
    from prometheus_client import generate_latest

    from follower.link.metrics import FollowerMetrics

    metrics = FollowerMetrics()
    metrics.sample()
    text = generate_latest(metrics.registry).decode()
    assert f"benchfleet_follower_gpus {float(len(GPUS))}" in text
    series = 'benchfleet_follower_gpu_power_watts{gpu="0"}'
    power = [float(line.split()[-1]) for line in text.splitlines() if line.startswith(series)]
    assert power and power[0] > 10


@needs_gpu
def test_a_foreign_cuda_process_invalidates_the_point_with_its_name_and_pid(wide: tuple[Path, ModelMeta], tmp_path: Path) -> None:
    """The GPU-busy gate between points, on a real GPU: another user's CUDA process (not a child of the agent's) that
    holds the GPU while a point runs makes that point invalid, naming it.

    The point runs in a process of its own (the agent), the stranger beside it as the test's child: a stranger started
    by the process that runs the point is that process's own descendant, which the gate rightly counts as the agent's
    (the first GPU run of this test, 2026-11-28 on an H100, failed so: no reason given)."""
    import json
    import subprocess
    import sys

    path, model = wide
    meta = tmp_path / "meta.json"
    meta.write_text(model.model_dump_json())
    spec = {
        "name": "gate",
        "model": "wide:1",
        "backends": ["torchscript"],
        "load": {"rate": 50, "duration": 1.0},
        "server": {"device": "cuda"},
    }
    code = "import sys, time, torch; x = torch.ones(1 << 20, device='cuda'); print('ready', flush=True); time.sleep(120)"
    stranger = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, start_new_session=True)
    try:
        assert stranger.stdout is not None and stranger.stdout.readline().strip() == b"ready"  # on the GPU now
        argv = [sys.executable, "-c", AGENT_POINT, str(path), str(meta), str(tmp_path), json.dumps(spec)]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
        done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=180, check=False)
    finally:
        stranger.kill()
        stranger.wait()
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    (reason,) = [text for code, text in result["reasons"] if code == "gpu_foreign"]
    assert not result["valid"] and f"(pid {stranger.pid}) on GPU" in reason, reason


ROOT = Path(__file__).resolve().parents[3]
# One point of `torchscript` with the GPU gate on, run as the agent runs it; prints its verdict as one JSON line.
AGENT_POINT = """
import asyncio, json, os, sys
from pathlib import Path
from common.spec.grid import expand
from common.spec.parse import parse_spec
from common.wire.models import ModelMeta
from follower.point.context import HostFacts, ServerRun
from follower.point.runner import run_backend

path, meta, workdir, spec = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]), json.loads(sys.argv[4])
model = ModelMeta.model_validate_json(meta.read_text())
facts = HostFacts(follower_id="f-gpu", host="gpuhost", cpu_model="cpu", cpu_count=os.cpu_count() or 1)


async def collect():
    run = ServerRun(model=model, model_path=path, workdir=workdir, host_facts=facts, gpu_gate=True)
    return [r async for r in run_backend("torchscript", expand(parse_spec(spec)), run)]


(result,) = asyncio.run(collect())
print(json.dumps({"valid": result.valid, "reasons": [[r.code, r.text] for r in result.reasons]}))
"""
