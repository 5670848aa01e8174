"""The skip budget: the tests allowed to skip on a CPU machine, each with the reason it must give and why.

Under CI (`CI` set) or with BENCHFLEET_SKIP_BUDGET=enforce, a run in which any other test skips, or a budgeted test
skips for another reason, fails (tests/conftest.py): a missing install step (Triton, the sandbox, the browser, vendored
assets, tmux, torch, vLLM, llama.cpp, the Kubernetes kit) shows as a failure, never as a quiet skip. On a GPU machine
the GPU entries do not skip, and the entries marked for a GPU host are the ones that may: a test that provokes what
only a CPU host can (a GPU server refusing to fall back to the CPU), or one a GPU image lacks the pieces for. An entry
that nothing used is reported, not failed. A pytest plugin, registered by tests/conftest.py.
"""

from __future__ import annotations

import fnmatch
import functools
import os
import shutil
import subprocess
from dataclasses import dataclass
from typing import Any

import pytest

NO_GPU = "no NVIDIA GPU with CUDA and NVML on this host"


@dataclass(frozen=True)
class Allowed:
    tests: str  # an fnmatch pattern over pytest node ids
    reason: str  # what the skip reason must start with
    because: str  # why it cannot run on a CPU CI machine
    host: str = "any"  # where it may skip: "any" host, only a "cpu" host (one without an NVIDIA GPU), only a "gpu" host


BUDGET = (
    Allowed("tests/e2e/test_gpu_fleet.py*", NO_GPU, "a fleet on a GPU needs a GPU", host="cpu"),
    Allowed("tests/integration/gpu/test_mps.py*", NO_GPU, "CUDA MPS needs a GPU", host="cpu"),
    Allowed(
        "tests/integration/gpu/test_gpu_paths.py::*", NO_GPU, "ONNX Runtime CUDA, TorchScript CUDA, vLLM's GPU flags", host="cpu"
    ),
    Allowed("tests/integration/gpu/test_gpu_servers.py::*", NO_GPU, "vLLM and llama.cpp on CUDA need a GPU", host="cpu"),
    Allowed(
        "tests/integration/follower/test_sampler.py::test_gpu_fields_present_with_nvml",
        "no NVIDIA GPU / NVML driver on this host",
        "GPU sampling reads NVML",
        host="cpu",
    ),
    Allowed(
        "tests/integration/follower/test_netshape.py::*",
        "this host cannot shape with netem",
        "this kernel has no sch_netem (tbf runs; delay, jitter and loss need netem)",
    ),
    Allowed(
        "tests/e2e/test_llm_jobs.py::test_an_llm_job_on_the_other_servers[[]sglang[]]",
        "sglang cannot run on this host",
        "SGLang's CPU build needs AMX or vLLM's CPU ops and a 9.5 GB environment",
    ),
    Allowed(
        "tests/e2e/test_llm_jobs.py::test_an_llm_job_on_the_other_servers[[]triton-openai[]]",
        "triton-openai cannot run on this host",
        "Triton's OpenAI frontend ships in NVIDIA's containers only",
    ),
    Allowed(
        "tests/integration/follower/test_backends_live.py::test_tfserving_live",
        "tensorflow_model_server is not on PATH",
        "TF Serving publishes no binary a package registry carries",
    ),
    Allowed(
        "tests/integration/follower/test_backends_live.py::test_tfserving_live",
        "TensorFlow is not installed",
        "a host with TF Serving's binary but without TensorFlow cannot export the SavedModel it serves",
    ),
    Allowed(
        "tests/unit/follower/test_convert.py::test_keras_to_savedmodel_is_checked_against_the_source",
        "TensorFlow is not installed",
        "TensorFlow (the tfserving extra) is not installed here: it is 600 MB for one converter test",
    ),
    # On a GPU host only:
    Allowed(
        "tests/integration/gpu/test_gpu_paths.py::test_gpu_server_without_cuda_fails_instead_of_using_the_cpu[[]torchscript-*",
        "CUDA is available here: the no-fallback path cannot be provoked",
        "a GPU server refusing to fall back to the CPU is provoked only where CUDA is absent",
        host="gpu",
    ),
    Allowed(
        "tests/integration/gpu/test_gpu_paths.py::test_gpu_server_without_cuda_fails_instead_of_using_the_cpu[[]onnxruntime-*",
        "this onnxruntime has CUDAExecutionProvider",
        "the no-fallback path of onnxruntime is provoked only by a build without its CUDA provider",
        host="gpu",
    ),
    Allowed(
        "tests/integration/gpu/test_gpu_paths.py::test_model_on_cuda_answers_like_the_cpu_reference[[]onnxruntime[]]",
        "onnxruntime ",
        "the GPU image carries a CPU-only onnxruntime wheel (onnxruntime-gpu is not installed there)",
        host="gpu",
    ),
    Allowed(
        "tests/integration/gpu/test_gpu_paths.py::test_model_on_cuda_answers_like_the_cpu_reference[[]triton[]]",
        "no Triton here",
        "a bare GPU machine without Triton (Triton's image has it; the CPU tests' extracted one is 345 MB, past a carry)",
        host="gpu",
    ),
    Allowed(
        "tests/integration/gpu/test_gpu_servers.py::test_vllm_serves_on_the_gpu_it_is_given",
        "no CUDA build of vLLM here",
        "a bare GPU machine without vLLM's CUDA build (gigabytes with its torch; the GPU image carries one in /opt/vllm)",
        host="gpu",
    ),
    Allowed(
        "tests/integration/gpu/test_gpu_servers.py::test_llamacpp_offloads_to_the_gpu_it_is_given",
        "no llama.cpp with a GPU offload here",
        "llama.cpp's environment is a CPU build (llama-cpp-python's wheel); a CUDA build is compiled on a GPU host",
        host="gpu",
    ),
    Allowed(
        "tests/integration/gpu/test_mps.py*",
        "MPS cannot run here",
        "a GPU host without nvidia-cuda-mps-control (or one that may not start its daemon)",
        host="gpu",
    ),
)


@functools.cache
def gpu_host() -> bool:
    """Whether this host has an NVIDIA GPU its driver answers for (nvidia-smi lists one)."""
    if shutil.which("nvidia-smi") is None:
        return False
    try:
        done = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0 and "GPU " in done.stdout


def enforced() -> bool:
    return bool(os.environ.get("CI")) or os.environ.get("BENCHFLEET_SKIP_BUDGET") == "enforce"


def skip_of(report: Any) -> tuple[str, str] | None:
    """(node id, reason) of a skipped test or collection report; None when it did not skip (or is an xfail)."""
    if not report.skipped or hasattr(report, "wasxfail"):
        return None
    longrepr = report.longrepr
    reason = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
    return report.nodeid, reason.removeprefix("Skipped: ")


def allowance(nodeid: str, reason: str, *, on_gpu: bool | None = None) -> Allowed | None:
    """The budget entry that allows this skip on this host (`on_gpu`: whether it has a GPU; None: look), None if none
    does."""
    on_gpu = gpu_host() if on_gpu is None else on_gpu
    for entry in BUDGET:
        here = entry.host == "any" or entry.host == ("gpu" if on_gpu else "cpu")
        if here and fnmatch.fnmatchcase(nodeid, entry.tests) and reason.startswith(entry.reason):
            return entry
    return None


def outside(skips: list[tuple[str, str]], *, on_gpu: bool | None = None) -> list[tuple[str, str]]:
    """The skips no budget entry allows on this host."""
    return [(nodeid, reason) for nodeid, reason in skips if allowance(nodeid, reason, on_gpu=on_gpu) is None]


SKIPS: list[tuple[str, str]] = []  # (node id, reason) of every test or module that skipped in this run


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if (skip := skip_of(report)) is not None:
        SKIPS.append(skip)


def pytest_collectreport(report: pytest.CollectReport) -> None:
    if (skip := skip_of(report)) is not None:
        SKIPS.append(skip)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Under enforcement, a skip outside the budget fails a run that would otherwise pass."""
    if enforced() and outside(SKIPS) and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """The budget's account: how many skips it allowed, and each skip outside it."""
    if not SKIPS:
        return
    terminalreporter.section("skip budget")
    within = sum(1 for nodeid, reason in SKIPS if allowance(nodeid, reason) is not None)
    terminalreporter.write_line(f"{within} skip(s) within the budget (tests/skip_budget.py)")
    verdict = "FAILS THE RUN" if enforced() else "would fail under CI"
    for nodeid, reason in outside(SKIPS):
        terminalreporter.write_line(f"OUTSIDE THE BUDGET ({verdict}): {nodeid}: {reason}", red=True)
