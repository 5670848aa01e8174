"""The clients and the endpoint bench/loadgen.py compares: our open loop, a naive asyncio client, wrk and Locust, against
a trivial HTTP/1.1 server in its own process; the figures they share (percentiles, spread, drift)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import numpy as np
import psutil

from common.procs import SupervisedProcess, free_port
from common.stats import block_bootstrap_ci
from follower.loadgen.openloop import drive
from follower.loadgen.schedule import arrival_offsets_ns
from follower.protocols import Endpoint  # noqa: E402

SERVER = r"""
import asyncio, os, sys, time
os.sched_setaffinity(0, {int(sys.argv[2])})
RESP = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Type: text/plain\r\n\r\nok"
class P(asyncio.Protocol):
    def connection_made(self, t): self.t = t; self.buf = b""
    def data_received(self, d):
        self.buf += d
        while True:
            head_end = self.buf.find(b"\r\n\r\n")
            if head_end < 0: return
            head = self.buf[:head_end].lower()
            n = 0
            i = head.find(b"content-length:")
            if i >= 0: n = int(head[i + 15:].split(b"\r\n", 1)[0])
            if len(self.buf) < head_end + 4 + n: return
            if self.buf.startswith(b"POST /stall"): time.sleep(1.0)  # blocks the loop: every request waits
            self.buf = self.buf[head_end + 4 + n:]
            self.t.write(RESP)
async def main():
    srv = await asyncio.get_running_loop().create_server(P, "127.0.0.1", int(sys.argv[1]), backlog=1024)
    print("ready", flush=True)
    await srv.serve_forever()
try:
    import uvloop; uvloop.run(main())
except ImportError:
    asyncio.run(main())
"""

LOCUSTFILE = """
import os, random
from locust import task
from locust.contrib.fasthttp import FastHttpUser
RATE = float(os.environ["BENCH_RATE"]) / int(os.environ["BENCH_USERS"])
class U(FastHttpUser):
    wait_time = lambda self: random.expovariate(RATE)
    @task
    def post(self):
        self.client.post("/", data=b"x" * 16)
"""

BODY = [b'{"inputs":[{"name":"x","shape":[1],"datatype":"FP32","data":[1]}]}']


@contextlib.contextmanager
def trivial_server(core: int) -> Iterator[tuple[str, int, SupervisedProcess, Path]]:
    """SERVER in its own process pinned to `core`, ready: yields (url, port, process, its temporary directory)."""
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        (tmp / "server.py").write_text(textwrap.dedent(SERVER))
        port = free_port()
        argv = [sys.executable, str(tmp / "server.py"), str(port), str(core)]
        with SupervisedProcess(argv, name="trivial-http", log_path=tmp / "server.log") as server:
            server.wait_ready(lambda: "ready" in (tmp / "server.log").read_text(), 30)
            yield f"http://127.0.0.1:{port}/", port, server, tmp


def trivial(url: str) -> Endpoint:
    """The trivial server as a KServe v2 HTTP endpoint (it answers every path alike)."""
    return Endpoint("kserve-http", url.rstrip("/"), "m")


def pct(a: np.ndarray, q: float) -> float:
    return float(np.percentile(a, q)) if len(a) else float("nan")


def ours(url: str, rate: float, duration: float, seed: int, ci: bool = False) -> dict[str, float]:
    """Our generator: Poisson schedule, latency from the intended time (`ci`: the p99's block-bootstrap CI too)."""
    offsets = arrival_offsets_ns("poisson", rate, duration, seed)
    cpu0 = time.process_time()
    rec = drive(trivial(url), BODY, offsets, max_concurrency=512)
    cpu = time.process_time() - cpu0
    ok = rec.ok
    lag = (rec.sent_ns[rec.sent] - rec.intended_ns[rec.sent]) / 1e6
    lat = (rec.done_ns[ok] - rec.intended_ns[ok]) / 1e6
    svc = (rec.done_ns[ok] - rec.sent_ns[ok]) / 1e6
    out = {
        "achieved": ok.sum() / duration,
        "lag_p99": pct(lag, 99),
        "p50": pct(lat, 50),
        "p99": pct(lat, 99),
        "svc_p99": pct(svc, 99),
        "cpu_us": 1e6 * cpu / max(int(ok.sum()), 1),
        "n": float(ok.sum()),
    }
    if ci and ok.sum() > 0:
        out["p99_lo"], out["p99_hi"] = (block_bootstrap_ci(rec.intended_ns[ok], lat, (0.99,), seed=seed) or [(np.nan,) * 2])[0]
    return out


def time_wait(port: int) -> int:
    """Client sockets towards `port` in TIME_WAIT (/proc/net/tcp): what closed connections leave behind."""
    try:
        lines = Path("/proc/net/tcp").read_text().splitlines()[1:]
    except OSError:
        return -1
    return sum(1 for line in lines if (f := line.split())[3] == "06" and int(f[2].split(":")[1], 16) == port)


def rss_mb(pid: int | None = None) -> float:
    try:
        return psutil.Process(pid).memory_info().rss / 2**20
    except psutil.Error:
        return float("nan")


def cpu_s(pid: int) -> float:
    try:
        return float(sum(psutil.Process(pid).cpu_times()[:2]))
    except psutil.Error:
        return float("nan")


async def _naive(url: str, rate: float, duration: float, seed: int, users: int, stall_at: float | None) -> dict[str, float]:
    """The common Python client: users that sleep an exponential gap, send, await the answer; timed from the send."""
    rng = np.random.default_rng(seed)
    lat: list[float] = []
    lag: list[float] = []
    start = time.monotonic()
    end = start + duration
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=users)) as session:

        async def user(k: int) -> None:
            due = start
            while True:
                gap = rng.exponential(users / rate)
                due += gap
                await asyncio.sleep(gap)  # relative sleep: the gap starts when the last answer came
                now = time.monotonic()
                if now >= end:
                    return
                lag.append((now - due) * 1e3)
                t0 = time.perf_counter()
                async with session.post(url, data=BODY[0]) as r:
                    await r.read()
                lat.append((time.perf_counter() - t0) * 1e3)

        async def staller() -> None:
            if stall_at is not None:
                await asyncio.sleep(stall_at)
                async with session.post(url.rsplit("/", 1)[0] + "/stall", data=b"") as r:
                    await r.read()

        cpu0 = time.process_time()
        await asyncio.gather(*(user(k) for k in range(users)), staller())
        cpu = time.process_time() - cpu0
    a, g = np.asarray(lat), np.asarray(lag)
    return {
        "achieved": len(a) / duration,
        "lag_p99": pct(np.maximum(g, 0), 99),
        "p50": pct(a, 50),
        "p99": pct(a, 99),
        "cpu_us": 1e6 * cpu / max(len(a), 1),
        "n": float(len(a)),
    }


def naive(url: str, rate: float, duration: float, seed: int, users: int = 64, stall_at: float | None = None) -> dict[str, float]:
    import uvloop

    return uvloop.run(_naive(url, rate, duration, seed, users, stall_at))


def ours_with_stall(url: str, rate: float, duration: float, stall_at: float) -> dict[str, float]:
    """Our generator while another thread asks the server to stall `stall_at` seconds in."""
    import threading

    def stall() -> None:
        time.sleep(stall_at + 0.05)  # drive() starts its schedule 50 ms after it is called
        host, port = url.split("//")[1].split("/")[0].split(":")
        with socket.create_connection((host, int(port))) as s:
            s.sendall(b"POST /stall HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
            s.recv(100)

    t = threading.Thread(target=stall, daemon=True)
    t.start()
    out = ours(url, rate, duration, seed=7)
    t.join()
    return out


def wrk(url: str, duration: float, core: int) -> dict[str, float] | None:
    """wrk's raw closed-loop ceiling on the same core (64 connections, one thread)."""
    exe = shutil.which("wrk")
    if exe is None:
        return None
    proc = subprocess.run(
        ["taskset", "-c", str(core), exe, "-t1", "-c64", f"-d{max(int(duration), 1)}s", "--latency", url],
        capture_output=True,
        text=True,
        timeout=duration + 30,
    )
    out = proc.stdout
    rps = re.search(r"Requests/sec:\s+([\d.]+)", out)
    if rps is None:
        print(f"wrk gave no figures (exit {proc.returncode}): {(proc.stderr or out)[-300:].strip()}")
    p99 = re.search(r"99%\s+([\d.]+)(us|ms|s)", out)
    scale = {"us": 1e-3, "ms": 1.0, "s": 1e3}
    return {
        "achieved": float(rps.group(1)) if rps else float("nan"),
        "p99": float(p99.group(1)) * scale[p99.group(2)] if p99 else float("nan"),
    }


def locust(url: str, rate: float, duration: float, core: int, tmp: Path) -> dict[str, float] | None:
    """Locust FastHttpUser, headless, users with exponential waits (its closest thing to Poisson), on one core."""
    exe = Path(sys.executable).with_name("locust")
    if not exe.exists():
        found = shutil.which("locust")  # installed beside another interpreter's scripts
        if found is None:
            return None
        exe = Path(found)
    users = 64
    (tmp / "locustfile.py").write_text(LOCUSTFILE)
    env = {**os.environ, "BENCH_RATE": str(rate), "BENCH_USERS": str(users)}
    base = url.rsplit("/", 1)[0]
    t0 = time.monotonic()
    proc = subprocess.run(
        [
            "taskset",
            "-c",
            str(core),
            str(exe),
            "-f",
            str(tmp / "locustfile.py"),
            "--headless",
            "-u",
            str(users),
            "-r",
            str(users * 10),
            "-t",
            f"{max(int(duration), 1)}s",
            "-H",
            base,
            "--csv",
            str(tmp / "loc"),
            "--only-summary",
        ],
        capture_output=True,
        text=True,
        timeout=duration + 60,
        env=env,
    )
    rows = (tmp / "loc_stats.csv").read_text().splitlines() if (tmp / "loc_stats.csv").exists() else []
    agg = next((r.split(",") for r in rows if ",Aggregated," in r), None)
    if agg is None:
        print("locust gave no stats:", proc.stderr[-500:])
        return None
    head = rows[0].split(",")
    row = dict(zip(head, agg, strict=False))

    def num(key: str) -> float:
        try:
            return float(row.get(key, "nan"))
        except ValueError:  # "N/A" when too few requests
            return float("nan")

    return {"achieved": num("Requests/s"), "p99": num("99%"), "wall_s": time.monotonic() - t0}


def valid(r: dict[str, float], rate: float) -> bool:
    return r["lag_p99"] < 1.0 and abs(r["achieved"] - rate) / rate <= 0.02


def spread(values: np.ndarray) -> float:
    """Largest deviation from the median, as a share of the median."""
    med = float(np.median(values))
    return float(np.max(np.abs(values - med)) / med) if med > 0 else float("nan")


def slope(values: np.ndarray) -> float:
    """Least-squares change per run as a share of the median (a drift shows as a steady slope)."""
    return float(np.polyfit(np.arange(len(values)), values, 1)[0] / np.median(values)) if len(values) > 1 else 0.0
