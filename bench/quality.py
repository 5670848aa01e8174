"""The cost of a job's quality pass (`quality:`) beside the load it follows.

The digits model (benchfleet/generate/digits.py) on benchfleet's ONNX Runtime server, run by the follower's own
point runner in-process: each point's load (Poisson, --rate for --duration s after a warm-up), then the quality pass
over the held-out digits (540 labelled samples, one request at a time at the point's batch size). Per batch size and
precision: the pass's wall time per 1,000 samples, and its share of the point's own measured load time (the
reference, measured in the same run). Figures printed, nothing asserted.

Usage: .venv/bin/python bench/quality.py [--rate 200] [--duration 10] [--batches 1 8] [--precisions float32 int8_dynamic]
Ends with one line: RESULT quality key=value ...
"""

from __future__ import annotations

import argparse
import asyncio
import io
import os
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchfleet.generate.digits import digits_mlp, digits_npz  # noqa: E402
from common.spec.job import PointSpec  # noqa: E402
from common.spec.quality import QualitySpec  # noqa: E402
from common.spec.server import ServerOptions  # noqa: E402
from common.wire.models import ModelMeta, TensorSpec  # noqa: E402
from common.wire.results import PointResult  # noqa: E402
from follower.point.context import HostFacts, ServerRun  # noqa: E402
from follower.point.runner import run_backend  # noqa: E402


async def run(args: argparse.Namespace, workdir: Path) -> list[PointResult]:
    model_bytes, _ = digits_mlp()
    path = workdir / "digits.onnx"
    path.write_bytes(model_bytes)
    held = np.load(io.BytesIO(digits_npz()))
    model = ModelMeta(
        name="digits",
        version="1",
        format="onnx",
        inputs=[TensorSpec(name="input", datatype="FP32", shape=[-1, 64])],
        outputs=[TensorSpec(name="output", datatype="FP32", shape=[-1, 10])],
        sha256="0" * 64,
        size_bytes=len(model_bytes),
        created_at=datetime.now(UTC),
    )
    results: list[PointResult] = []
    for precision in args.precisions:
        server = ServerOptions(precision=precision)
        points = [
            PointSpec(
                index=i,
                backend="onnxruntime",
                batch_size=b,
                pattern="poisson",
                rate=args.rate,
                duration_s=args.duration,
                warmup_s=1.0,
                seed=1,
                server=server,
            )
            for i, b in enumerate(args.batches)
        ]
        run_ = ServerRun(
            model=model,
            model_path=path,
            workdir=workdir / precision,
            host_facts=HostFacts(follower_id="bench", cpu_count=os.cpu_count() or 1),
            samples={"input": list(held["input"])},
            quality=QualitySpec(max_samples=len(held["labels"])),
            truth=held["labels"],
        )
        (workdir / precision).mkdir()
        results += [r async for r in run_backend("onnxruntime", points, run_)]
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=200.0)
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--precisions", nargs="+", default=["float32", "int8_dynamic"])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-quality-") as tmp:
        results = asyncio.run(run(args, Path(tmp)))
    figures: dict[str, str] = {}
    print(f"{'precision':>13} {'batch':>5} {'samples':>7} {'top-1':>22} {'pass s':>7} {'s/1k':>6} {'load s':>7} {'pass/load':>9}")
    for r in results:
        quality = r.quality
        assert quality is not None and quality.accuracy is not None, quality
        top1 = quality.accuracy.top1
        per_1k = quality.seconds / top1.samples * 1000
        share = quality.seconds / r.measured_s
        precision, batch = r.point.server.precision, r.point.batch_size
        print(
            f"{precision:>13} {batch:>5} {top1.samples:>7} {top1.points():>22} {quality.seconds:>7.3f} {per_1k:>6.3f} "
            f"{r.measured_s:>7.2f} {share:>9.3f}"
        )
        key = f"{precision}_b{batch}"
        figures[f"pass_s_per_1k_{key}"] = f"{per_1k:.3f}"
        figures[f"pass_vs_load_{key}"] = f"{share:.3f}"
        figures[f"top1_{key}"] = f"{top1.value:.4f}"
    print("pass/load: the quality pass's wall time over the point's measured load time (the reference, same run)")
    print("RESULT quality " + " ".join(f"{k}={v}" for k, v in figures.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
