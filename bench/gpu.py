"""The same canonical model served by TorchScript on the GPU and on the CPU: latency, throughput, power, energy.

For each batch size, an open-loop Poisson point through the real runner (warm-up, verdict, resource sampler at
≥ 10 Hz on the generator's clock) with the model on `cuda` and then on `cpu`; prints p50/p99, achieved rate, GPU
utilisation, mean GPU power, energy per request (GPU power integrated over the measured part) and the achieved
FLOP/s against the GPU's roofline ceiling. Needs an NVIDIA GPU with CUDA (exits 2 with the reason otherwise).
Usage: python bench/gpu.py [--rate 100] [--duration 4] [--batches 1 8 32] [--width 2048] [--depth 4]
Ends with one line: RESULT gpu key=value ...
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common.spec.grid import expand  # noqa: E402
from common.spec.parse import parse_spec  # noqa: E402
from follower.convert.canonical import CanonicalSpec, generate, local_model  # noqa: E402
from follower.host import hostinfo  # noqa: E402
from follower.host.sampler import SamplerConfig  # noqa: E402
from follower.point.context import HostFacts, ServerRun  # noqa: E402
from follower.point.runner import run_backend  # noqa: E402
from leader.analysis.hardware import ceiling_for  # noqa: E402


def main() -> int:
    """Run the GPU/CPU points and print the table and the RESULT line."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--rate", type=float, default=100.0)
    parser.add_argument("--duration", type=float, default=4.0)
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--width", type=int, default=2048)
    parser.add_argument("--depth", type=int, default=4)
    parser.add_argument("--batching-rate", type=float, default=1500.0, help="rate of the dynamic batching off/on pair")
    args = parser.parse_args()
    import torch

    gpus = hostinfo.gpus()
    if not (torch.cuda.is_available() and gpus):
        print("no NVIDIA GPU with CUDA and NVML here: nothing to measure")
        return 2
    bundle, meta = generate(CanonicalSpec("fc", depth=args.depth, width=args.width, input_size=args.width // 2))
    workdir = Path(tempfile.mkdtemp(prefix="bench-gpu-"))
    path = workdir / "model.zip"
    path.write_bytes(bundle)
    model = local_model(bundle, meta, "fc")
    flops = meta["cost_per_inference"]["flops"]
    table_name, ceiling = ceiling_for(gpus[0].name)
    facts = HostFacts(
        follower_id="bench",
        host="bench",
        cpu_model=hostinfo.cpu_model(),
        cpu_count=os.cpu_count() or 1,
        gpus=tuple(g.name for g in gpus),
    )
    print(
        f"{gpus[0].name}, {gpus[0].memory_mb} MiB; torch {torch.__version__}; model fc depth {args.depth} width "
        f"{args.width}: {flops / 1e6:.1f} MFLOP per sample; Poisson {args.rate:g} req/s, {args.duration:g} s per point"
    )
    print(
        f"{'device':6s} {'batch':>5s} {'p50 ms':>8s} {'p99 ms':>8s} {'req/s':>8s} {'GPU %':>6s} {'GPU W':>6s} "
        f"{'J/req':>8s} {'TFLOP/s':>8s} valid"
    )
    figures: dict[str, float] = {}

    def measure(label: str, batch: int, rate: float, server: dict) -> object:
        spec = parse_spec(
            {
                "name": "gpu",
                "model": "fc:1",
                "backends": ["torchscript"],
                "batch_sizes": [batch],
                "seed": 7,
                "server": server,
                "load": {"rate": rate, "duration": args.duration, "warmup": 1.0},
            }
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
                        workdir=workdir / label,
                        host_facts=facts,
                        slo=None,
                        sampling=SamplerConfig(grid_g_co2_per_kwh=400.0),
                    ),
                )
            ]

        return asyncio.run(collect())[0]

    for batch in args.batches:
        for device in ("cuda", "cpu"):
            r = measure(f"{device}{batch}", batch, args.rate, {"device": device})
            res = r.resources
            lat = r.latency_ms
            tflops = flops * batch * r.achieved_rate / 1e12
            p50 = lat.p50 if lat else float("nan")
            p99 = lat.p99 if lat else float("nan")
            util = res.gpu_util_percent_mean if res and res.gpu_util_percent_mean is not None else float("nan")
            watts = res.gpu_power_w_mean if res and res.gpu_power_w_mean is not None else float("nan")
            joules = res.energy_per_request_j if res and res.energy_per_request_j is not None else float("nan")
            print(
                f"{device:6s} {batch:5d} {p50:8.3f} {p99:8.3f} {r.achieved_rate:8.1f} {util:6.1f} {watts:6.1f} "
                f"{joules:8.4f} {tflops:8.4f} {r.valid} {'; '.join(r.invalid_reasons)[:100]}"
            )
            key = f"{device}_b{batch}"
            figures.update(
                {
                    f"{key}_p50_ms": p50,
                    f"{key}_p99_ms": p99,
                    f"{key}_rps": r.achieved_rate,
                    f"{key}_gpu_w": watts,
                    f"{key}_j_per_req": joules,
                }
            )
        figures[f"speedup_p50_b{batch}"] = figures[f"cpu_b{batch}_p50_ms"] / figures[f"cuda_b{batch}_p50_ms"]
    print(
        f"\ndynamic batching on the GPU at {args.batching_rate:g} req/s of batch-1 requests (our server, max batch 32, "
        "queue delay 2 ms):"
    )
    for label, server in (
        ("off", {"device": "cuda"}),
        ("on", {"device": "cuda", "dynamic_batching": {"max_batch_size": 32, "max_queue_delay_us": 2000}}),
    ):
        r = measure(f"batching-{label}", 1, args.batching_rate, server)
        lat, res, stats = r.latency_ms, r.resources, r.server_stats
        p50, p99 = (lat.p50, lat.p99) if lat else (float("nan"), float("nan"))
        mean_batch = stats.mean_batch if stats is not None and stats.mean_batch is not None else float("nan")
        joules = res.energy_per_request_j if res and res.energy_per_request_j is not None else float("nan")
        print(
            f"  batching {label:3s}: p50 {p50:8.3f} ms  p99 {p99:8.3f} ms  {r.achieved_rate:7.1f} req/s  "
            f"mean batch {mean_batch:5.2f}  {joules:.4f} J/req  valid={r.valid}"
        )
        figures.update(
            {
                f"batching_{label}_p99_ms": p99,
                f"batching_{label}_rps": r.achieved_rate,
                f"batching_{label}_mean_batch": mean_batch,
                f"batching_{label}_j_per_req": joules,
            }
        )
    best = max(flops * b * figures[f"cuda_b{b}_rps"] for b in args.batches)
    figures["cuda_peak_fraction"] = best / ceiling.fp32_flops
    print(
        f"roofline ceiling ({table_name} datasheet): {ceiling.fp32_flops / 1e12:.0f} TFLOP/s FP32; the best point "
        f"reached {100 * figures['cuda_peak_fraction']:.3f}% of it (open-loop serving at this rate is latency-bound)"
    )
    print("RESULT gpu " + " ".join(f"{k}={v:.4g}" for k, v in figures.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
