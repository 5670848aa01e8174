"""Co-location interference on real ONNX Runtime servers: two CPU models, each alone and then both at once on the
same server cores (`colocate: {cpus: shared}`), through the follower's own co-location runner
(follower/point/colocate.py). Each model takes about 0.7 ms of a core per request: at 600 req/s a server holds 40% of
its core alone, 80% of it shared with the other, so the pair's medians must rise. Per run it prints each model's p50
and p99 alone and beside the other, and the ratio of the medians (together / alone, measured in the same run).

The median, not the tail: a host stall of ~100 ms during a run decides its p99, and moves the median of 2,400
requests by a few of them. This is where the claim that co-located servers are measured slower together lives (the
integration test, tests/integration/follower/test_colocate.py, asserts the runs' plumbing: every run, measured at the
same time as its partner).

Usage: .venv/bin/python -m bench.colocate [--runs 3] [--rate 600] [--duration 4]
Ends with one line: RESULT colocate key=value ...
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
from datetime import UTC, datetime
from pathlib import Path

from benchfleet.generate.modelgen import mlp_onnx
from common.spec.grid import expand
from common.spec.job import JobSpec
from common.spec.slo import SLO
from common.wire.models import ModelMeta, TensorSpec
from common.wire.results import PointResult
from follower.host.cpuplan import plan_cpus
from follower.point.colocate import run_colocated
from follower.point.context import HostFacts, ServerRun

HOST = HostFacts(follower_id="bench", host="bench", cpu_model="cpu", cpu_count=os.cpu_count() or 1)


def heavy_model(path: Path, name: str, seed: int) -> tuple[ModelMeta, Path]:
    """An MLP that takes about 0.7 ms of a core per request."""
    path.write_bytes(mlp_onnx(inputs=256, hidden=1536, outputs=10, layers=3, seed=seed))
    meta = ModelMeta(
        name=name,
        version="1",
        format="onnx",
        inputs=[TensorSpec(name="input", datatype="FP32", shape=[-1, 256])],
        outputs=[TensorSpec(name="output", datatype="FP32", shape=[-1, 10])],
        sha256="0" * 64,
        size_bytes=path.stat().st_size,
        created_at=datetime.now(UTC),
    )
    return meta, path


def colocate_spec(rate: float = 600.0, duration_s: float = 4.0) -> JobSpec:
    """The pair's job: model co-a beside co-b, one thread each, sharing the server cores."""
    return JobSpec.model_validate(
        {
            "name": "co",
            "model": "co-a:1",
            "backends": ["onnxruntime"],
            "slo": {"p99_ms": 10_000},
            "load": {"pattern": "poisson", "rate": rate, "duration": f"{duration_s:g}s", "warmup": "1s"},
            "server": {"threads": 1},
            "colocate": {"models": ["co-b:1"], "cpus": "shared"},
        }
    )


def run_pair(workdir: Path, spec: JobSpec) -> dict[tuple[int, tuple[int, ...]], PointResult]:
    """Each model alone and both together, keyed by (model served, models beside it)."""
    models = [heavy_model(workdir / "a.onnx", "co-a", 1), heavy_model(workdir / "b.onnx", "co-b", 2)]
    colocate = spec.colocate
    assert colocate is not None

    async def run() -> list[PointResult]:
        return [
            r
            async for r in run_colocated(
                "onnxruntime",
                expand(spec),
                ServerRun(model=models[0][0], model_path=models[0][1], workdir=workdir, host_facts=HOST, slo=SLO(p99_ms=10_000)),
                models=models,
                colocate=colocate,
            )
        ]

    return {(r.point.served, tuple(r.point.beside)): r for r in asyncio.run(run())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--rate", type=float, default=600.0)
    parser.add_argument("--duration", type=float, default=4.0)
    args = parser.parse_args()
    if plan_cpus().server is None:
        raise SystemExit(f"this host has {os.cpu_count()} CPU: the generator and the servers cannot have cores apart")
    slower = 0
    ratios: list[float] = []
    for run in range(args.runs):
        with tempfile.TemporaryDirectory() as tmp:
            results = run_pair(Path(tmp), colocate_spec(args.rate, args.duration))
        both = True
        for model in (0, 1):
            alone, together = results[(model, ())].latency_ms, results[(model, (1 - model,))].latency_ms
            assert alone is not None and together is not None
            ratio = together.p50 / alone.p50
            ratios.append(ratio)
            both &= ratio > 1.0
            print(
                f"run {run + 1} model {model}: p50 alone {alone.p50:.2f} ms, together {together.p50:.2f} ms "
                f"(x{ratio:.2f}); p99 alone {alone.p99:.2f} ms, together {together.p99:.2f} ms",
                flush=True,
            )
        slower += both
    print(
        f"RESULT colocate runs={args.runs} slower_together={slower} p50_ratio_min={min(ratios):.2f} "
        f"p50_ratio_max={max(ratios):.2f} rate={args.rate:g} duration_s={args.duration:g}"
    )


if __name__ == "__main__":
    main()
