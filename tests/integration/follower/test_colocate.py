"""Co-location with real ONNX Runtime servers: two CPU models sharing one core interfere, and the runs say so."""

from __future__ import annotations

import asyncio
import os
from datetime import UTC, datetime
from pathlib import Path

import pytest

from benchfleet.generate.modelgen import mlp_onnx
from common.spec.colocate import ColocateSpec
from common.spec.grid import expand
from common.spec.job import JobSpec
from common.spec.slo import SLO
from common.wire.models import ModelMeta, TensorSpec
from common.wire.results import PointResult
from follower.host.cpuplan import plan_cpus
from follower.point.colocate import assign_cpus, run_colocated
from follower.point.context import ServerRun
from tests.integration.follower.test_runner import HOST

pytestmark = pytest.mark.integration


def heavy_model(path: Path, name: str, seed: int) -> tuple[ModelMeta, Path]:
    """An MLP that takes about 0.7 ms of a core per request: at 600 req/s a server holds 40% of its core alone, 80%
    of it shared with the other."""
    path.write_bytes(mlp_onnx(inputs=256, hidden=1536, outputs=10, layers=3, seed=seed))
    meta = ModelMeta(name=name, version="1", format="onnx", inputs=[TensorSpec(name="input", datatype="FP32", shape=[-1, 256])],
                     outputs=[TensorSpec(name="output", datatype="FP32", shape=[-1, 10])], sha256="0" * 64,
                     size_bytes=path.stat().st_size, created_at=datetime.now(UTC))  # fmt: skip
    return meta, path


def test_split_cores_give_each_server_its_own_and_too_few_are_shared() -> None:
    assert assign_cpus(frozenset({1, 2, 3, 4}), 2, "split") == [frozenset({1, 3}), frozenset({2, 4})]
    assert assign_cpus(frozenset({1}), 2, "split") == [frozenset({1}), frozenset({1})]
    assert assign_cpus(frozenset({1, 2}), 2, "shared") == [frozenset({1, 2})] * 2


def test_two_cpu_models_sharing_one_core_are_slower_together_than_alone(tmp_path: Path) -> None:
    if plan_cpus().server is None:
        pytest.skip(f"this host has {os.cpu_count()} CPU: the generator and the servers cannot have cores apart")
    models = [heavy_model(tmp_path / "a.onnx", "co-a", 1), heavy_model(tmp_path / "b.onnx", "co-b", 2)]
    spec = JobSpec.model_validate({
        "name": "co", "model": "co-a:1", "backends": ["onnxruntime"], "slo": {"p99_ms": 10_000},
        "load": {"pattern": "poisson", "rate": 600, "duration": "4s", "warmup": "1s"},
        "server": {"threads": 1}, "colocate": {"models": ["co-b:1"], "cpus": "shared"},
    })  # fmt: skip
    assert spec.colocate is not None
    points = expand(spec)

    async def run() -> list[PointResult]:
        colocate: ColocateSpec = spec.colocate  # type: ignore[assignment]
        return [
            r
            async for r in run_colocated(
                "onnxruntime",
                points,
                ServerRun(model=models[0][0], model_path=models[0][1], workdir=tmp_path, host_facts=HOST, slo=SLO(p99_ms=10_000)),
                models=models,
                colocate=colocate,
            )
        ]

    results = {(r.point.served, tuple(r.point.beside)): r for r in asyncio.run(run())}
    assert sorted(results) == [(0, ()), (0, (1,)), (1, ()), (1, (0,))]
    for model in (0, 1):
        alone, together = results[(model, ())], results[(model, (1 - model,))]
        assert alone.latency_ms is not None and together.latency_ms is not None and alone.ok > 0 and together.ok > 0
        a, t = alone.latency_ms, together.latency_ms
        print(f"\nmodel {model}: p50 {a.p50:.2f} / {t.p50:.2f} ms, p99 alone {a.p99:.2f} ms, beside the other {t.p99:.2f} ms")
        # The median, not the tail: a host stall of ~100 ms during the run alone decides its p99 (CI saw p99 90.6 ms
        # alone, 85.7 together, with medians 1.7 and 6.3 ms); it moves the median of 2,400 requests by a few of them.
        assert t.p50 > a.p50, (a, t)
