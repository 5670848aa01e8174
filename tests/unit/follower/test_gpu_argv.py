"""What every backend tells its server about a GPU, proven on every run without one: the command line and the
environment each server is started with for `device: cuda:N` (or a GPU execution provider) against the CPU's.

The GPU paths themselves run only where a GPU is (tests/integration/gpu, tests/e2e/test_gpu_fleet.py,
scripts/device_gpu_check.sh); what they are given is fixed here, so a change to a flag shows on every CI run."""

from __future__ import annotations

from pathlib import Path

import pytest

from common.spec.server import LlmServerOptions, ServerOptions
from follower.backends import LlamaCppBackend, OnnxRuntimeBackend, SglangBackend, TorchScriptBackend, VllmBackend
from follower.backends.llmserver import OpenAiServerBackend
from follower.convert.triton_repo import config_pbtxt
from tests.unit.follower.test_llm_servers import MODEL as LLM
from tests.unit.follower.test_point_pipeline import MODEL as TENSOR

CPU = ServerOptions()


def _gpu(index: int = 1, **llm: object) -> ServerOptions:
    return ServerOptions(device=f"cuda:{index}", llm=LlmServerOptions.model_validate(llm))


def _flag(argv: list[str], name: str) -> str | None:
    """The value after `name` in a command line (None: the flag is not there)."""
    return argv[argv.index(name) + 1] if name in argv else None


def test_vllm_on_a_gpu_keeps_the_dtype_sizes_its_kv_cache_in_bytes_and_sees_only_its_gpu(tmp_path: Path) -> None:
    server = VllmBackend(server=_gpu(1, kv_cache_gb=1.5))
    argv = server.argv(tmp_path, LLM, 8000, tmp_path)
    assert _flag(argv, "--dtype") == "auto"  # the model's own dtype on a GPU (float32 is the CPU build's "auto")
    assert _flag(argv, "--kv-cache-memory-bytes") == str(int(1.5 * 2**30))
    env = server.environment()
    assert env["CUDA_VISIBLE_DEVICES"] == "1"
    assert not {"VLLM_CPU_KVCACHE_SPACE", "VLLM_CPU_OMP_THREADS_BIND"} & set(env)
    assert _flag(VllmBackend(server=_gpu(0, dtype="bfloat16")).argv(tmp_path, LLM, 1, tmp_path), "--dtype") == "bfloat16"
    assert "--kv-cache-memory-bytes" not in VllmBackend(server=_gpu(0)).argv(tmp_path, LLM, 1, tmp_path)  # vLLM's share


def test_vllm_on_the_cpu_gets_the_cpu_builds_settings_and_no_gpu(tmp_path: Path) -> None:
    server = VllmBackend(server=ServerOptions(llm=LlmServerOptions(kv_cache_gb=2)), cpus=frozenset({3, 2}))
    argv = server.argv(tmp_path, LLM, 8000, tmp_path)
    assert _flag(argv, "--dtype") == "float32" and "--kv-cache-memory-bytes" not in argv
    env = server.environment()
    assert (env["VLLM_CPU_KVCACHE_SPACE"], env["VLLM_CPU_OMP_THREADS_BIND"]) == ("2", "2,3")
    assert "CUDA_VISIBLE_DEVICES" not in env


def test_llamacpp_offloads_every_layer_to_its_gpu_only_on_a_gpu(tmp_path: Path) -> None:
    gpu = LlamaCppBackend(server=_gpu(2, enforce_eager=True))
    assert _flag(gpu.argv(tmp_path / "m.gguf", LLM, 1, tmp_path), "--n-gpu-layers") == "999"
    assert gpu.environment()["CUDA_VISIBLE_DEVICES"] == "2"
    assert gpu.environment()["GGML_CUDA_DISABLE_GRAPHS"] == "1"  # enforce_eager: no CUDA graphs
    cpu = LlamaCppBackend(server=CPU)
    assert _flag(cpu.argv(tmp_path / "m.gguf", LLM, 1, tmp_path), "--n-gpu-layers") == "0"
    assert "CUDA_VISIBLE_DEVICES" not in cpu.environment()


def test_sglang_on_a_gpu_is_not_told_cpu_and_sees_only_its_gpu(tmp_path: Path) -> None:
    gpu = SglangBackend(server=_gpu(3))
    argv = gpu.argv(tmp_path, LLM, 1, tmp_path)
    assert "--device" not in argv and _flag(argv, "--mem-fraction-static") is not None
    assert gpu.environment()["CUDA_VISIBLE_DEVICES"] == "3"
    assert _flag(SglangBackend(server=CPU).argv(tmp_path, LLM, 1, tmp_path), "--device") == "cpu"
    assert "CUDA_VISIBLE_DEVICES" not in SglangBackend(server=CPU).environment()


@pytest.mark.parametrize(
    ("options", "provider", "device_id"),
    [
        (ServerOptions(), "CPUExecutionProvider", None),
        (ServerOptions(device="cuda"), "CUDAExecutionProvider", "0"),
        (ServerOptions(device="cuda:1"), "CUDAExecutionProvider", "1"),
        (ServerOptions(execution_provider="TensorrtExecutionProvider"), "TensorrtExecutionProvider", "0"),
        (ServerOptions(device="cuda:2", execution_provider="TensorrtExecutionProvider"), "TensorrtExecutionProvider", "2"),
    ],
)
def test_onnxruntime_gets_its_execution_provider_and_gpu(
    tmp_path: Path, options: ServerOptions, provider: str, device_id: str | None
) -> None:
    argv = OnnxRuntimeBackend(server=options).argv(tmp_path / "m.onnx", TENSOR)
    assert argv[1:3] == ["-m", "follower.servers.ort_server"]
    assert (_flag(argv, "--provider"), _flag(argv, "--device-id")) == (provider, device_id)


@pytest.mark.parametrize("device", ["cpu", "cuda", "cuda:1"])
def test_torchscript_runs_on_the_device_the_spec_names(tmp_path: Path, device: str) -> None:
    argv = TorchScriptBackend(server=ServerOptions(device=device)).argv(tmp_path / "m.pt", TENSOR)
    assert argv[1:3] == ["-m", "follower.servers.torchscript_server"] and _flag(argv, "--device") == device


@pytest.mark.parametrize("onnxruntime_backend", [True, False])
def test_triton_gets_gpu_instances_on_the_named_gpu(onnxruntime_backend: bool) -> None:
    gpu = config_pbtxt(TENSOR, ServerOptions(device="cuda:1", instances=2), onnxruntime_backend=onnxruntime_backend)
    assert "instance_group [ { kind: KIND_GPU count: 2 gpus: [ 1 ] } ]" in gpu
    cpu = config_pbtxt(TENSOR, ServerOptions(instances=2), onnxruntime_backend=onnxruntime_backend)
    assert "instance_group [ { kind: KIND_CPU count: 2 } ]" in cpu and "gpus" not in cpu
    if not onnxruntime_backend:  # benchfleet's python model runs ORT itself, with the provider the spec implies
        assert 'key: "provider" value: { string_value: "CUDAExecutionProvider" }' in gpu
        assert 'key: "provider" value: { string_value: "CPUExecutionProvider" }' in cpu


@pytest.mark.parametrize("backend", [VllmBackend, SglangBackend, LlamaCppBackend])
def test_an_llm_server_on_a_gpu_sees_its_gpu_only_whatever_the_follower_sees(
    backend: type[OpenAiServerBackend], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The follower may see several GPUs (CUDA_VISIBLE_DEVICES of its own): its server is narrowed to the one its
    configuration names; the driver's settings pass, the follower's credentials do not."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3")
    monkeypatch.setenv("NVIDIA_DRIVER_CAPABILITIES", "compute,utility")
    monkeypatch.setenv("BENCHFLEET_FOLLOWER_TOKEN", "secret")
    env = backend(server=_gpu(1)).environment()
    assert (env["CUDA_VISIBLE_DEVICES"], env["NVIDIA_DRIVER_CAPABILITIES"]) == ("1", "compute,utility")
    assert "BENCHFLEET_FOLLOWER_TOKEN" not in env
