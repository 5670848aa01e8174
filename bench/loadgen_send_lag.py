"""Print the open-loop generator's send lag, CPU share and loop lag per timer strategy against a real ORT server.

Usage: .venv/bin/python bench/loadgen_send_lag.py [--rates 200 500] [--duration 8] [--timers thread yield]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np
import orjson

from benchfleet.generate.modelgen import mlp_onnx
from common.procs import SupervisedProcess, free_port, http_ready
from follower.loadgen.openloop import drive
from follower.loadgen.schedule import arrival_offsets_ns
from follower.protocols import Endpoint  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rates", type=float, nargs="+", default=[200.0, 500.0])
    parser.add_argument("--duration", type=float, default=8.0)
    parser.add_argument("--timers", nargs="+", default=["thread", "yield"])
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--server-args", nargs="*", default=[])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        model = Path(tmp) / "mlp.onnx"
        model.write_bytes(mlp_onnx())
        port = free_port()
        argv = [
            sys.executable,
            "-m",
            "follower.servers.ort_server",
            "--model",
            str(model),
            "--name",
            "mlp",
            "--port",
            str(port),
            *args.server_args,
        ]
        with SupervisedProcess(argv, name="ort", log_path=Path(tmp) / "ort.log") as proc:
            proc.wait_ready(http_ready(f"http://127.0.0.1:{port}/v2/health/ready"), 30)
            rng = np.random.default_rng(0)
            bodies = [
                orjson.dumps(
                    {
                        "inputs": [
                            {
                                "name": "input",
                                "shape": [1, 64],
                                "datatype": "FP32",
                                "data": rng.standard_normal(64).astype(np.float32).tolist(),
                            }
                        ]
                    }
                )
                for _ in range(16)
            ]
            url = Endpoint("kserve-http", f"http://127.0.0.1:{port}", "mlp")
            drive(url, bodies, arrival_offsets_ns("constant", 200, 1.0, 0))  # warm the server
            heads = ("timer", "rate", "n", "lag p50", "lag p99", "lag max", "cpu%", "tick p99", "lat p99")
            print(" ".join(f"{h:>8}" for h in heads), " (ms)")
            for rate in args.rates:
                for timer in args.timers:
                    for rep in range(args.repeats):
                        offsets = arrival_offsets_ns("poisson", rate, args.duration, rep)
                        rec = drive(url, bodies, offsets, timer=timer)
                        sent = rec.sent
                        lag = (rec.sent_ns[sent] - rec.intended_ns[sent]) / 1e6
                        ok = rec.ok
                        lat = (rec.done_ns[ok] - rec.intended_ns[ok]) / 1e6
                        tick = rec.loop_lag_ns / 1e6
                        figures = [np.percentile(lag, 50), np.percentile(lag, 99), lag.max(), 100 * rec.cpu_share]
                        figures += [np.percentile(tick, 99), np.percentile(lat, 99)]
                        row = f"{timer:>8} {rate:>8.0f} {len(rec):>8} " + " ".join(f"{f:8.3f}" for f in figures)
                        print(row, f" ok={ok.sum()}")


if __name__ == "__main__":
    main()
