"""One real point against the real ORT server, and the runner's clean-up when the server dies or the run is cancelled."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from pathlib import Path

import psutil
import pytest

from common.spec.job import PointSpec
from common.spec.slo import SLO
from common.wire.models import ModelMeta
from common.wire.results import PointResult
from follower.loadgen.records import LoadRecords
from follower.loadgen.verdict import CPU_SHARE_MAX, MIN_COMPLETED, SEND_LAG_P99_MAX_MS, WindowSummary
from follower.point.context import HostFacts, ServerRun
from follower.point.runner import run_backend
from tests.verdicts import assert_verdict_follows_figures

pytestmark = pytest.mark.integration

HOST = HostFacts(follower_id="f-test", host="testhost", cpu_model="test cpu", cpu_count=os.cpu_count() or 1)


def point(index: int = 0, *, rate: float = 200.0, duration_s: float = 3.0, warmup_s: float = 1.0, seed: int = 1) -> PointSpec:
    return PointSpec(
        index=index, backend="onnxruntime", batch_size=1, pattern="poisson", rate=rate,
        duration_s=duration_s, warmup_s=warmup_s, max_concurrency=64, seed=seed,
    )  # fmt: skip


def server_children() -> list[psutil.Process]:
    """Our ORT server processes still alive (not zombies)."""
    out = []
    for child in psutil.Process().children(recursive=True):
        try:
            if "follower.servers.ort_server" in " ".join(child.cmdline()) and child.status() != psutil.STATUS_ZOMBIE:
                out.append(child)
        except psutil.Error:
            continue
    return out


async def collect(points: list[PointSpec], model: ModelMeta, model_path: Path, workdir: Path, **kw: object) -> list[PointResult]:
    return [
        r
        async for r in run_backend(
            "onnxruntime", points, ServerRun(model=model, model_path=model_path, workdir=workdir, host_facts=HOST, **kw)
        )
    ]  # type: ignore[arg-type]


def test_one_real_point(mlp_meta: ModelMeta, mlp_path: Path, tmp_path: Path) -> None:
    sink: list[tuple[PointSpec, LoadRecords, WindowSummary]] = []
    results = asyncio.run(
        collect([point()], mlp_meta, mlp_path, tmp_path, slo=SLO(p99_ms=10_000.0), records_sink=lambda *a: sink.append(a))
    )
    (result,) = results
    lag, lat = result.send_lag_ms, result.latency_ms
    print(
        f"\npoint: {result.requests} req, ok {result.ok}, offered {result.offered_rate:.1f}/s, "
        f"achieved {result.achieved_rate:.1f}/s, send lag p50 {lag and lag.p50} p99 {lag and lag.p99} ms, "
        f"latency p99 {lat and lat.p99} ms, generator cpu {100 * sink[0][2].cpu_share:.0f}%, "
        f"valid={result.valid} reasons={result.invalid_reasons}"
    )
    assert result.requests >= MIN_COMPLETED
    assert result.ok + result.errors <= result.requests
    assert result.errors == 0, result.error_sample
    assert result.latency_ms is not None and result.latency_ms.count == result.ok
    assert result.latency_ms.p99 >= result.latency_ms.p50 > 0
    assert result.service_ms is not None and result.send_lag_ms is not None
    # Latency from the intended time can never be shorter than service time from the send.
    assert result.latency_ms.p50 >= result.service_ms.p50 * 0.999
    # Poisson: the realised offered rate is near the nominal one (5 sigma for ~600 arrivals is ~20%).
    assert result.offered_rate == pytest.approx(200.0, rel=0.2)
    assert result.cold_start is not None
    assert 0 < result.cold_start.to_ready_s <= result.cold_start.to_first_answer_s
    assert result.slo_met is True
    env = result.environment
    assert (env.follower_id, env.seed, env.cpu_count) == ("f-test", 1, os.cpu_count())
    assert env.backend_version and env.python and env.benchfleet
    # The verdict agrees with the figures, whatever this machine's speed made them.
    summary = sink[0][2]
    codes = [r.code for r in result.reasons]
    assert ("send_lag" in codes) == (result.send_lag_ms.p99 > SEND_LAG_P99_MAX_MS)
    assert ("generator_saturated" in codes) == (summary.cpu_share > CPU_SHARE_MAX)
    # The generator thread's wait for its core was measured (Linux schedstat) and is named beside a send-lag reason.
    waited = sink[0][1].run_queue_share
    assert waited is None or 0.0 <= waited <= 1.0
    lag_reasons = [r.text for r in result.reasons if r.code == "send_lag"]
    if waited is not None and waited >= 0.01:
        assert all("for its core" in r for r in lag_reasons), lag_reasons
    # The rate: a miss is named exactly when the achieved rate is off the offered one (it was asserted within 2%, which
    # a host stall of the server breaks; a quiet host's valid point at this load is bench/repeatability.py's claim).
    assert_verdict_follows_figures(result)
    # Server stage timings came back with every answer.
    assert summary.stages_ms["infer_ns"] is not None and summary.stages_ms["infer_ns"].count == result.ok
    assert (tmp_path / "onnxruntime.log").exists()
    assert server_children() == []


def test_server_dying_mid_run_gives_invalid_results_not_exceptions(mlp_meta: ModelMeta, mlp_path: Path, tmp_path: Path) -> None:
    def kill_server_soon() -> None:
        for child in server_children():
            os.kill(child.pid, signal.SIGKILL)

    # Kill while the first point is being measured: its first live window (1 s into a 3 s run) is the signal, not a
    # timer, so a slow machine cannot push the kill past the point's end.
    measuring = threading.Event()

    async def run() -> list[PointResult]:
        async def killer() -> None:
            await asyncio.to_thread(measuring.wait)
            await asyncio.to_thread(kill_server_soon)

        task = asyncio.create_task(killer())
        try:
            return [
                r
                async for r in run_backend(
                    "onnxruntime",
                    [point(0, duration_s=3.0, warmup_s=0.2), point(1, duration_s=0.5, warmup_s=0.0)],
                    ServerRun(
                        model=mlp_meta,
                        model_path=mlp_path,
                        workdir=tmp_path,
                        host_facts=HOST,
                        slo=None,
                        progress_sink=lambda p, _windows: measuring.set() if p.index == 0 else None,
                    ),
                )
            ]
        finally:
            measuring.set()  # never leave the killer's thread waiting
            task.cancel()

    first, second = asyncio.run(run())
    assert not first.valid
    assert first.errors > 0
    assert "server_died" in [r.code for r in first.reasons], first.reasons
    assert not second.valid and second.ok == 0
    assert "server_not_running" in [r.code for r in second.reasons], second.reasons
    assert second.cold_start is None
    assert server_children() == []


def test_cancellation_stops_the_server(mlp_meta: ModelMeta, mlp_path: Path, tmp_path: Path) -> None:
    """A cancelled point stops at once, not when its schedule ends, and its server is gone when the cancel returns."""
    stopped_s: list[float] = []

    async def run() -> None:
        task = asyncio.create_task(collect([point(duration_s=30.0)], mlp_meta, mlp_path, tmp_path, slo=None))
        while not server_children():
            await asyncio.sleep(0.05)
        await asyncio.sleep(1.0)
        cancelled_at = time.monotonic()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        stopped_s.append(time.monotonic() - cancelled_at)

    asyncio.run(run())
    assert server_children() == []
    # The generator notices within 50 ms and the server gets SIGTERM: seconds at most, where it took the schedule's 30 s.
    assert stopped_s[0] < CANCEL_STOPS_WITHIN_S, f"the cancelled point took {stopped_s[0]:.1f} s to stop"


CANCEL_STOPS_WITHIN_S = 10.0  # a third of the point's schedule: waiting it out (the defect) cannot pass
