"""The resource sampler against the real ORT server: CPU and RSS of its process tree on the generator's clock."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import numpy as np
import psutil
import pytest

from common.spec.job import PointSpec
from common.wire.models import ModelMeta
from follower.backends import get_backend
from follower.host.sampler import ResourceSampler, SamplerConfig, Window, _Nvml, summarize
from follower.loadgen.bodies import build_bodies
from follower.loadgen.schedule import point_offsets_ns
from follower.point.context import HostFacts, ServerRun
from follower.point.runner import run_backend

pytestmark = pytest.mark.integration

HOST = HostFacts(follower_id="f-test", host="testhost", cpu_model="cpu", cpu_count=os.cpu_count() or 1)


def _tree(pid: int) -> list[psutil.Process]:
    root = psutil.Process(pid)
    return [root, *root.children(recursive=True)]


def _peak_rss_bytes(pid: int) -> int:
    """The tree's summed high-water RSS (VmHWM) as the kernel counts it: no sample can exceed it."""
    total = 0
    for proc in _tree(pid):
        for line in Path(f"/proc/{proc.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                total += int(line.split()[1]) * 1024
    return total


def test_sampler_follows_the_real_server_under_load(mlp_meta: ModelMeta, mlp_path: Path, tmp_path: Path) -> None:
    from follower.loadgen.openloop import drive

    backend = get_backend("onnxruntime")
    backend.start(mlp_path, mlp_meta, tmp_path)
    try:
        backend.wait_ready(60.0)
        pid = backend.process.pid
        point = PointSpec(index=0, backend="onnxruntime", batch_size=1, pattern="poisson", rate=300.0, duration_s=1.5,
                          warmup_s=0.0, seed=3, max_concurrency=64)  # fmt: skip
        offsets = point_offsets_ns(point, point.duration_s, point.seed)
        bodies = build_bodies(mlp_meta.inputs, 1, seed=0)
        cpu_before = sum(p.cpu_times().user + p.cpu_times().system for p in _tree(pid))
        sampler = ResourceSampler(pid, SamplerConfig(interval_s=0.05)).start()
        t0 = time.monotonic_ns()
        records = drive(backend.serves(mlp_meta), bodies, offsets)
        samples = sampler.stop()
        cpu_after = sum(p.cpu_times().user + p.cpu_times().system for p in _tree(pid))
        rss_now = sum(p.memory_info().rss for p in _tree(pid))
        peak = _peak_rss_bytes(pid)
    finally:
        backend.stop()
    assert int(records.ok.sum()) > 300
    assert samples.cpu_percent is not None and samples.rss_bytes is not None
    # >= 10 Hz: the series is dense (a 50 ms period, allowing for a busy 2-core VM).
    span_s = (samples.t_ns[-1] - samples.t_ns[0]) / 1e9
    assert len(samples.t_ns) >= 10 * span_s
    assert samples.t_ns[0] >= t0 - 200_000_000  # the generator's monotonic clock
    # CPU: the sampled percentages, each over its own interval, integrate exactly to the CPU time the kernel charged
    # the tree from start() to the last sample; the test's own reads before start() and after stop() add only what
    # the idle server used in those gaps: at most a clock tick in each (the kernel counts CPU time in ticks).
    dt = np.diff(np.concatenate([[samples.start_ns], samples.t_ns])) / 1e9
    integrated = float((samples.cpu_percent / 100 * dt).sum())
    charged = cpu_after - cpu_before
    tick = 1 / os.sysconf("SC_CLK_TCK")
    assert integrated > 2 * tick, (integrated, charged)  # the load's CPU, not only a gap's
    assert -1e-9 <= charged - integrated <= 2 * tick + 1e-9, (integrated, charged)
    res = summarize(samples, Window(int(samples.t_ns[0]), int(samples.t_ns[-1]), int(records.ok.sum())), SamplerConfig())
    assert res.server_cpu_percent_mean is not None and 0 < res.server_cpu_percent_mean <= 100 * (os.cpu_count() or 1) + 20
    assert res.server_rss_mb_mean is not None and res.server_rss_mb_max is not None
    # RSS: positive, never above the kernel's high-water mark, not far below what the tree holds now.
    assert 0 < res.server_rss_mb_mean <= res.server_rss_mb_max <= peak / 2**20
    assert res.server_rss_mb_max >= 0.8 * rss_now / 2**20
    if not _Nvml(None).available:
        # No GPU here: every GPU-derived field is absent, not zero.
        assert res.gpu_util_percent_mean is None and res.gpu_memory_mb_max is None and res.gpu_power_w_mean is None
        assert res.energy_j is None


def test_point_result_carries_resources(mlp_meta: ModelMeta, mlp_path: Path, tmp_path: Path) -> None:
    point = PointSpec(index=0, backend="onnxruntime", batch_size=1, pattern="poisson", rate=200.0, duration_s=1.5,
                      warmup_s=0.3, seed=5, max_concurrency=64)  # fmt: skip
    config = SamplerConfig(grid_g_co2_per_kwh=400.0, instance_price_per_hour=3.6)

    async def run() -> list:
        return [
            r
            async for r in run_backend(
                "onnxruntime",
                [point],
                ServerRun(model=mlp_meta, model_path=mlp_path, workdir=tmp_path, host_facts=HOST, slo=None, sampling=config),
            )
        ]

    (result,) = asyncio.run(run())
    res = result.resources
    assert res is not None and res.samples >= 10  # 1.5 s measured at 12.5 Hz
    assert res.interval_ms is not None and res.interval_ms <= 100.0
    assert res.server_cpu_percent_mean is not None and res.server_cpu_percent_mean > 0
    assert res.server_rss_mb_mean is not None and res.server_rss_mb_mean > 1
    # Cost needs only the price: 3.6 per hour = 0.001 per second, over the answered requests.
    assert res.cost_per_1m_requests == pytest.approx(0.001 * result.measured_s / result.ok * 1e6, rel=1e-6)
    if res.energy_j is None and res.cpu_energy_j is None:
        # Nothing measured energy here (no GPU, no readable RAPL): energy and CO2 are absent, never estimated.
        assert res.energy_per_request_j is None and res.co2_g_per_1m_requests is None
    else:
        assert res.co2_g_per_1m_requests is not None and res.co2_g_per_1m_requests > 0


@pytest.mark.skipif(not _Nvml(None).available, reason="no NVIDIA GPU / NVML driver on this host: GPU sampling untestable")
def test_gpu_fields_present_with_nvml() -> None:
    sampler = ResourceSampler(os.getpid(), SamplerConfig(interval_s=0.05)).start()
    time.sleep(0.5)
    samples = sampler.stop()
    assert samples.gpu_util_percent is not None and samples.gpu_memory_bytes is not None
    res = summarize(samples, Window(int(samples.t_ns[0]), int(samples.t_ns[-1]), 1000), SamplerConfig(grid_g_co2_per_kwh=400))
    assert res.gpu_memory_mb_max is not None and res.gpu_memory_mb_max > 0
    if res.gpu_power_w_mean is not None:
        assert res.energy_j is not None and res.energy_j > 0 and res.co2_g_per_1m_requests is not None
