"""bench/wire.py's tensor half: benchfleet and Triton's perf_analyzer (C++, in its own folder: bench/install_peers.sh)
take turns against one KServe v2 server that answers at once (raw asyncio on its own core: the clients are what is
measured), at a ladder of Poisson rates, each client pinned to the other core at real-time priority, while the
server's port is captured (follower/host/wirecap.py). Per run: each client's latency p50/p99 against the wire's over
its own requests (the wire's request begins with its first byte leaving, ends with the answer's last byte arriving),
its CPU per request, and whether it kept the rate (benchfleet: the point's verdict; perf_analyzer: its own count of
delayed requests, and the achieved rate within 2%).
"""

from __future__ import annotations

import contextlib
import csv
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from benchfleet.stack import LocalStack
from common.procs import SupervisedProcess, free_port, http_ready
from common.stats import quantile
from common.wire.jobs import TERMINAL_STATES, JobState
from common.wire.results import PointResult
from follower.host.wirecap import Captured, open_capture
from follower.loadgen.wireaudit import wire_requests

PEERS_DIR = Path(os.environ.get("BENCHFLEET_PEERS", Path.home() / ".cache" / "benchfleet" / "peers"))
PERF_ANALYZER = PEERS_DIR / "perf_analyzer" / "perf_analyzer"

SERVER = r"""
import asyncio, json, os, sys
os.sched_setaffinity(0, {int(sys.argv[2])})
def reply(body, status=b"200 OK"):
    head = b"HTTP/1.1 " + status + b"\r\nContent-Type: application/json\r\nContent-Length: " + str(len(body)).encode()
    return head + b"\r\n\r\n" + body
META = json.dumps({"name": "m", "versions": ["1"], "platform": "onnxruntime_onnx",
    "inputs": [{"name": "x", "datatype": "FP32", "shape": [-1, 4]}],
    "outputs": [{"name": "y", "datatype": "FP32", "shape": [-1, 1]}]}).encode()
CONFIG = json.dumps({"name": "m", "max_batch_size": 8,
    "input": [{"name": "x", "data_type": "TYPE_FP32", "dims": [4]}],
    "output": [{"name": "y", "data_type": "TYPE_FP32", "dims": [1]}]}).encode()
ANSWER = reply(b'{"model_name":"m","outputs":[{"name":"y","datatype":"FP32","shape":[1,1],"data":[0.5]}]}')
ROUTES = {b"/v2": reply(b'{"name":"fast","version":"0","extensions":[]}'), b"/v2/health/ready": reply(b""),
    b"/v2/health/live": reply(b""), b"/v2/models/m": reply(META), b"/v2/models/m/config": reply(CONFIG),
    b"/v2/models/m/ready": reply(b"")}
class P(asyncio.Protocol):
    def connection_made(self, t): self.t = t; self.buf = b""
    def data_received(self, d):
        self.buf += d
        while True:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0: return
            head = self.buf[:end].lower()
            at = head.find(b"content-length:")
            n = int(head[at + 15:].split(b"\r\n")[0]) if at >= 0 else 0
            if len(self.buf) < end + 4 + n: return
            path = self.buf.split(b" ", 2)[1].split(b"?")[0]
            self.buf = self.buf[end + 4 + n:]
            self.t.write(ANSWER if path.endswith(b"/infer") else ROUTES.get(path, reply(b"{}", b"404 Not Found")))
async def main():
    loop = asyncio.get_running_loop()
    server = await loop.create_server(P, "127.0.0.1", int(sys.argv[1]), backlog=4096)
    async with server: await server.serve_forever()
asyncio.run(main())
"""


@contextlib.contextmanager
def fast_server(core: int) -> Iterator[str]:
    """A KServe v2 server of one model, `m`, answering every request at once, on `core`; its base URL."""
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "server.py"
        script.write_text(SERVER)
        argv = [sys.executable, str(script), str(port), str(core)]
        with SupervisedProcess(argv, name="fast KServe server", log_path=Path(tmp) / "server.log") as proc:
            proc.wait_ready(http_ready(f"http://127.0.0.1:{port}/v2/health/ready"), timeout_s=30)
            yield f"http://127.0.0.1:{port}"


def _pinned(core: int) -> list[str]:
    return ["taskset", "-c", str(core), *(["chrt", "-f", "50"] if os.geteuid() == 0 else [])]


def _wire_latency(captured: Captured) -> tuple[float, float, int]:
    """The wire's latency p50, p99 (ms) over a capture's answered requests, and their count."""
    answered = [r for r in wire_requests(captured) if r.answer is not None and r.answer.done_ns >= 0]
    ms = np.array([(r.answer.done_ns - r.send_ns) / 1e6 for r in answered if r.answer is not None])
    return quantile(ms, 0.5), quantile(ms, 0.99), len(ms)


def perf_analyzer(url: str, rate: float, seconds: float, core: int) -> dict[str, float]:
    """One perf_analyzer run at `rate` (Poisson), captured: its figures, the wire's, its CPU per request."""
    opened = open_capture(f"{url}/v2/models/m/infer")
    if isinstance(opened, str):
        raise RuntimeError(opened)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "pa.csv"
        argv = [*_pinned(core), str(PERF_ANALYZER), "-m", "m", "-u", url.removeprefix("http://"), "-i", "http"]
        argv += ["--request-rate-range", f"{rate:g}", "--request-distribution", "poisson", "--measurement-mode", "time_windows"]
        argv += ["--measurement-interval", str(int(seconds * 1000 / 3)), "--stability-percentage", "999"]
        argv += ["--percentile", "99", "-f", str(out), "--shape", "x:1,4"]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        capture = opened.start()
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=600)
        finally:
            captured = capture.stop()
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if proc.returncode != 0:
            raise RuntimeError(f"perf_analyzer exited {proc.returncode}: {(proc.stdout + proc.stderr)[-1500:]}")
        (row,) = list(csv.DictReader(out.open()))
    cpu_s = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    w50, w99, n = _wire_latency(captured)
    delayed = re.search(r"Delayed Request Count:\s*(\d+)", proc.stdout)
    achieved = float(row["Inferences/Second"])
    return {
        "client_p50": float(row["p50 latency"]) / 1e3,
        "client_p99": float(row["p99 latency"]) / 1e3,
        "wire_p50": w50,
        "wire_p99": w99,
        "cpu_us_per_request": 1e6 * cpu_s / max(n, 1),  # its whole run's CPU over every request it sent
        "achieved": achieved,
        "valid": float((delayed is None or int(delayed.group(1)) == 0) and abs(achieved - rate) <= 0.02 * rate),
        "delayed": float(delayed.group(1)) if delayed else 0.0,
        "drops": float(captured.drops),
    }


def benchfleet_run(stack: LocalStack, url: str, rate: float, seconds: float) -> dict[str, float]:
    """One audited endpoint point at `rate` (Poisson): its figures against the wire, its CPU per request, its verdict."""
    yaml = f"""\
name: wire-tensor-{rate:g}
model: m
inputs: [{{name: x, datatype: FP32, shape: [-1, 4]}}]
target: {{url: "{url}", protocol: kserve-http}}
load: {{pattern: poisson, rate: {rate:g}, duration: {seconds:g}s, warmup: 2s}}
audit: wire
"""
    return _figures(audited_point(stack, yaml), rate)


def audited_point(stack: LocalStack, yaml: str, timeout_s: float = 900) -> PointResult:
    """Submit a one-point job with `audit: wire` to the local stack, wait for it, and return its point, audited."""
    with stack.client() as client:
        job = client.submit_yaml(yaml)
        started = time.monotonic()
        while job.state not in TERMINAL_STATES:
            if time.monotonic() - started > timeout_s:
                raise TimeoutError(f"the audited job did not end in {timeout_s:g} s (state {job.state})")
            time.sleep(0.5)
            job = client.job(job.id)
        if job.state != JobState.succeeded:
            raise RuntimeError(f"the audited job {job.state}: {job.error}")
        (point,) = client.results(job.id).points
    if point.wire is None or not point.wire.ran:
        raise RuntimeError(f"the point was not audited: {point.wire and point.wire.why_not}")
    return point


def _figures(point: PointResult, rate: float) -> dict[str, float]:
    wire = point.wire
    assert wire is not None  # audited_point checked it
    latency = wire.figure("latency")
    assert latency is not None
    if not point.valid:
        print(f"    benchfleet at {rate:g} req/s invalid: {'; '.join(r.text for r in point.reasons)[:400]}")
    return {
        "client_p50": latency.client_p50,
        "client_p99": latency.client_p99,
        "wire_p50": latency.wire_p50,
        "wire_p99": latency.wire_p99,
        "cpu_us_per_request": 1e6 * (point.generator_cpu_share or 0.0) / rate,
        "achieved": point.achieved_rate,
        "valid": float(point.valid),
        "send_p99_us": wire.send_us.p99 if wire.send_us else float("nan"),
        "drops": float(wire.drops),
    }


def run(stack: LocalStack, rates: list[float], seconds: float, result: dict[str, float]) -> list[dict[str, float]]:
    """Both clients at each rate; the worst relative error of each per rate (as bench/wire.py's LLM half gives)."""
    cores = sorted(os.sched_getaffinity(0))
    client_core, server_core = cores[0], cores[-1]
    errors = []
    if not PERF_ANALYZER.exists():
        print(f"  perf_analyzer: not installed ({PERF_ANALYZER.parent} missing; bench/install_peers.sh makes it)")
    with fast_server(server_core) as url:
        columns = ("p50 ms", "wire", "err", "p99 ms", "wire", "err")
        print(f"{'rate':>6} {'client':<13} " + " ".join(f"{c:>8}" for c in columns) + f" {'cpu µs/req':>10} {'valid':>5}")
        for rate in rates:
            runs = {"benchfleet": benchfleet_run(stack, url, rate, seconds)}
            if PERF_ANALYZER.exists():
                runs["perf_analyzer"] = perf_analyzer(url, rate, seconds, client_core)
            worst = {}
            for tool, r in runs.items():
                e50 = (r["client_p50"] - r["wire_p50"]) / r["wire_p50"]
                e99 = (r["client_p99"] - r["wire_p99"]) / r["wire_p99"]
                figures = (r["client_p50"], r["wire_p50"], 100 * e50, r["client_p99"], r["wire_p99"], 100 * e99)
                cells = " ".join(f"{v:+7.2f}%" if k % 3 == 2 else f"{v:8.3f}" for k, v in enumerate(figures))
                verdict = "yes" if r["valid"] else "NO"
                print(f"{rate:6g} {tool:<13} {cells} {r['cpu_us_per_request']:10.1f} {verdict:>5}")
                key = f"tensor_{tool}_{rate:g}"
                result[f"{key}_p99_err_pct"] = round(100 * e99, 2)
                result[f"{key}_cpu_us"] = round(r["cpu_us_per_request"], 1)
                result[f"{key}_valid"] = int(r["valid"])
                worst[tool] = max(abs(e50), abs(e99))
            errors.append(worst)
    for tool in ("benchfleet", "perf_analyzer"):
        valid = [rate for rate in rates if result.get(f"tensor_{tool}_{rate:g}_valid")]
        result[f"tensor_{tool}_max_valid_rate"] = max(valid, default=0.0)
    return errors
