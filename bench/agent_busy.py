"""Send lag with the agent busy: the open-loop generator in a thread of the agent's process (as it ran before) against
the generator in a process of its own (follower/loadgen/apart.py, as it runs now).

This process stands in for the agent. "Busy" starts two of its threads doing what an agent does between and during
points, continuously: one runs Python code (encoding and decoding a 200 KB result document with json, dict walks),
one validates that document with pydantic (compiled code that holds the interpreter lock while it runs). The
generator sends a Poisson schedule to the trivial HTTP server of bench/loadgen.py (its own core); the generator's core
is the other one, the same for both ways, at the same priority (follower/host/cpuplan.py). Per way and load: send lag
(sent - intended) p50, p99 and max, and how many sends were more than 1 ms late, over --repeats runs.

Usage: .venv/bin/python bench/agent_busy.py [--rate 1000] [--duration 4] [--repeats 3]
Ends with one line: RESULT agent_busy key=value ...
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from loadgen_clients import BODY, trivial, trivial_server  # noqa: E402

from common.stats import quantile  # noqa: E402
from follower.loadgen.apart import Generators, OpenLoopRun, run_point  # noqa: E402
from follower.loadgen.records import LoadRecords  # noqa: E402
from follower.loadgen.schedule import arrival_offsets_ns  # noqa: E402

DOC: dict[str, Any] = {"points": [{"index": i, "latency": [float(j) for j in range(40)], "name": f"p{i}"} for i in range(600)]}


class Point(BaseModel):
    index: int
    latency: list[float]
    name: str


class Doc(BaseModel):
    points: list[Point]


def busy(stop: threading.Event) -> list[threading.Thread]:
    """Two agent threads at work until `stop`: Python code, and compiled validation holding the lock."""

    def python_work() -> None:
        while not stop.is_set():
            text = json.dumps(DOC)
            loaded = json.loads(text)
            sum(len(p["latency"]) for p in loaded["points"])

    def validation() -> None:
        while not stop.is_set():
            Doc.model_validate(DOC)

    threads = [threading.Thread(target=f, daemon=True) for f in (python_work, validation)]
    for t in threads:
        t.start()
    return threads


def lag_ms(records: LoadRecords) -> np.ndarray:
    sent = records.sent_ns >= 0
    return (records.sent_ns[sent] - records.intended_ns[sent]) / 1e6


def one(run: OpenLoopRun, way: str, generators: Generators, agent_busy: bool) -> np.ndarray:
    stop_busy = threading.Event()
    threads = busy(stop_busy) if agent_busy else []
    try:
        if way == "process":
            records = generators.run(run, threading.Event()).records
        else:  # a thread of this process, as the generator ran in the agent before
            out: list[LoadRecords] = []
            t = threading.Thread(target=lambda: out.append(run_point(run, threading.Event(), None).records))
            t.start()
            t.join()
            records = out[0]
    finally:
        stop_busy.set()
        for t in threads:
            t.join()
    return lag_ms(records)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", type=float, default=1000.0)
    parser.add_argument("--duration", type=float, default=4.0)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    cores = sorted(os.sched_getaffinity(0))
    gen_core, srv_core = cores[0], cores[-1]
    results: dict[str, float] = {}
    generators = Generators()
    with trivial_server(srv_core) as (url, _port, _server, _tmp):
        endpoint = trivial(url)
        print(f"generator on core {gen_core}, server on core {srv_core}; Poisson {args.rate:g} req/s, {args.duration:g} s")
        print(f"{'way':>8} {'agent':>6} {'lag p50':>8} {'lag p99':>8} {'lag max':>8} {'> 1 ms':>7}   (ms; median of runs)")
        try:
            for agent_busy in (False, True):
                for way in ("thread", "process"):
                    rows = []
                    for seed in range(args.repeats):
                        offsets = arrival_offsets_ns("poisson", args.rate, args.duration, seed=seed)
                        run = OpenLoopRun(
                            endpoint, list(BODY), offsets, max_concurrency=256, timeout_s=10, cpus=frozenset({gen_core})
                        )
                        lag = one(run, way, generators, agent_busy)
                        rows.append((quantile(lag, 0.5), quantile(lag, 0.99), float(lag.max()), float((lag > 1).sum())))
                    p50, p99, worst, late = (float(np.median([r[k] for r in rows])) for k in range(4))
                    state = "busy" if agent_busy else "quiet"
                    print(f"{way:>8} {state:>6} {p50:8.3f} {p99:8.3f} {worst:8.3f} {late:7.0f}")
                    key = f"{way}_{state}"
                    results |= {f"{key}_lag_p99_ms": p99, f"{key}_lag_max_ms": worst, f"{key}_late_1ms": late}
        finally:
            generators.close()
    results["busy_p99_thread_over_process"] = results["thread_busy_lag_p99_ms"] / max(results["process_busy_lag_p99_ms"], 1e-6)
    print(
        f"\nwith the agent busy, send lag p99 {results['thread_busy_lag_p99_ms']:.3f} ms in a thread of the agent against "
        f"{results['process_busy_lag_p99_ms']:.3f} ms in the generator's own process "
        f"({results['busy_p99_thread_over_process']:.1f}x)"
    )
    print("RESULT agent_busy " + " ".join(f"{k}={v:.4g}" for k, v in results.items()))


if __name__ == "__main__":
    main()
