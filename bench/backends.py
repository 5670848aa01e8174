"""Per-backend latency and throughput on the same canonical model and load, and our server's added overhead.

Prints p50/p99/achieved throughput per backend (open-loop Poisson load through the real runner), then the
per-request overhead of benchfleet's own ORT server against calling onnxruntime in-process (sequential batch-1
requests over one keep-alive HTTP connection, closed loop, by a minimal raw-socket client and by http.client;
all figures measured in this run). Ends with one RESULT line.
Usage: .venv/bin/python bench/backends.py [--rate 200] [--duration 5]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common.spec.grid import expand  # noqa: E402
from common.spec.parse import parse_spec  # noqa: E402
from common.wire.models import ModelMeta  # noqa: E402
from follower.backends import get_backend  # noqa: E402
from follower.backends.triton import find_triton  # noqa: E402
from follower.convert.canonical import CanonicalSpec, generate, local_model  # noqa: E402
from follower.loadgen.bodies import build_bodies  # noqa: E402
from follower.point.context import ServerRun
from follower.point.runner import run_backend  # noqa: E402


class _RawClient:
    """A minimal HTTP/1.1 keep-alive client on one socket: the request is one prebuilt send, the answer is read by
    its Content-Length. http.client parses every response's headers with the email package, which costs a few
    hundred microseconds of the *client's* CPU per request on a small VM; this one costs a few, so its round trip
    is the server's (plus loopback), like wrk's or curl's."""

    def __init__(self, host: str, port: int, url: str, body: bytes) -> None:
        import socket

        self.sock = socket.create_connection((host, port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        head = f"POST {url} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
        self.request = f"{head}Content-Length: {len(body)}\r\n\r\n".encode("ascii") + body

    def post(self) -> bytes:
        """Send the request; return the response body (raises on anything but a 200 with a Content-Length)."""
        self.sock.sendall(self.request)
        buf = b""
        while (end := buf.find(b"\r\n\r\n")) < 0:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("server closed the connection")
            buf += chunk
        lines = buf[:end].split(b"\r\n")
        if lines[0].split()[1] != b"200":
            raise RuntimeError(f"server answered {lines[0]!r}")
        fields = (line.partition(b":") for line in lines[1:])
        length = next(int(v) for k, _, v in fields if k.strip().lower() == b"content-length")
        while len(buf) < end + 4 + length:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("server closed the connection")
            buf += chunk
        return buf[end + 4 : end + 4 + length]

    def close(self) -> None:
        self.sock.close()


def overhead(path: Path, model: ModelMeta, workdir: Path, n: int) -> tuple[float, float, float]:
    """p50 of in-process session.run, and of an HTTP round trip to our ORT server (ms), batch 1, closed loop.

    The round trip is measured with two sequential clients, interleaved in blocks so that both see the same
    machine: a minimal raw-socket one (the server's figure) and http.client (what a Python client sees).
    """
    import http.client
    import json

    import onnxruntime as ort

    from follower.backends.artifacts import artifact

    onnx_file = artifact(path, model, "onnx", workdir)
    body = build_bodies(model.inputs, 1, seed=0, variants=1)[0]
    feed = {"input": np.asarray(json.loads(body)["inputs"][0]["data"], dtype=np.float32).reshape(1, -1)}
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(str(onnx_file), sess_options=options, providers=["CPUExecutionProvider"])
    inproc = []
    for _ in range(n):
        t = time.perf_counter_ns()
        session.run(None, feed)
        inproc.append(time.perf_counter_ns() - t)
    backend = get_backend("onnxruntime", intra_op_threads=1)
    backend.start(path, model, workdir / "overhead")
    try:
        backend.wait_ready(60)
        url = f"/v2/models/{model.name}/infer"
        raw = _RawClient("127.0.0.1", backend.port, url, body)
        conn = http.client.HTTPConnection("127.0.0.1", backend.port)
        raw_ns: list[int] = []
        http_ns: list[int] = []
        block = 100
        for start in range(-50, n, block):  # the first 50 requests of each client warm the connection and server
            for i in range(start, start + block):
                t = time.perf_counter_ns()
                raw.post()
                if i >= 0:
                    raw_ns.append(time.perf_counter_ns() - t)
            for i in range(start, start + block):
                t = time.perf_counter_ns()
                conn.request("POST", url, body=body, headers={"Content-Type": "application/json"})
                conn.getresponse().read()
                if i >= 0:
                    http_ns.append(time.perf_counter_ns() - t)
        raw.close()
        conn.close()
    finally:
        backend.stop()
    return (float(np.median(inproc)) / 1e6, float(np.median(raw_ns[:n])) / 1e6, float(np.median(http_ns[:n])) / 1e6)


def main() -> int:
    """Run the comparison and print the table and the RESULT line."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--rate", type=float, default=200.0)
    parser.add_argument("--duration", type=float, default=5.0)
    parser.add_argument("--requests", type=int, default=2000, help="sequential requests for the overhead figure")
    args = parser.parse_args()
    bundle, meta = generate(CanonicalSpec("fc", depth=2, width=64, input_size=32))
    workdir = Path(tempfile.mkdtemp(prefix="bench-backends-"))
    path = workdir / "canon.zip"
    path.write_bytes(bundle)
    model = local_model(bundle, meta, "canon")
    backends = ["onnxruntime", "torchscript"] + (["triton"] if find_triton() else [])
    rows = {}
    for name in backends:
        spec = parse_spec(
            {
                "name": "bench",
                "model": "canon:1",
                "backends": [name],
                "load": {"rate": args.rate, "duration": args.duration, "warmup": 1.0},
            }
        )

        async def collect(name: str = name, spec: object = spec) -> list:
            return [
                r
                async for r in run_backend(
                    name, expand(spec), ServerRun(model=model, model_path=path, workdir=workdir / name, slo=None)
                )
            ]

        result = asyncio.run(collect())[0]
        lat = result.latency_ms
        rows[name] = (lat.p50 if lat else float("nan"), lat.p99 if lat else float("nan"), result.achieved_rate, result.valid)
        print(
            f"{name:12s} p50 {rows[name][0]:7.3f} ms  p99 {rows[name][1]:7.3f} ms  "
            f"throughput {rows[name][2]:8.1f} req/s  valid={result.valid} {'; '.join(result.invalid_reasons)[:120]}"
        )
    inproc, http_p50, pyclient_p50 = overhead(path, model, workdir, args.requests)
    added = http_p50 - inproc
    print(
        f"in-process onnxruntime p50 {inproc:.3f} ms; our HTTP server p50 {http_p50:.3f} ms (raw-socket client; "
        f"{pyclient_p50:.3f} ms through http.client); added {added:.3f} ms "
        f"(floor < 0.5 ms: {'met' if added < 0.5 else 'NOT met'})"
    )
    parts = " ".join(f"{n}_p50_ms={r[0]:.3f} {n}_p99_ms={r[1]:.3f} {n}_rps={r[2]:.1f}" for n, r in rows.items())
    print(
        f"RESULT backends rate={args.rate:g} {parts} ort_inproc_p50_ms={inproc:.3f} ort_http_p50_ms={http_p50:.3f} "
        f"ort_http_pyclient_p50_ms={pyclient_p50:.3f} http_overhead_p50_ms={added:.3f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
