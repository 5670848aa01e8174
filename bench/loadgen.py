"""Our open-loop generator against a naive asyncio client, Locust FastHttpUser and wrk, on one generator core.

What it prints (ratios measured in this run, not asserted anywhere):
  1. rate ladder: the highest Poisson rate each client sustains on one core with send-lag p99 < 1 ms and the
     achieved rate within 2% of the target, and its CPU per request;
  2. stall: the server pauses 1 s in the middle of a run; p99 from the *intended* time (ours) vs from the *send*
     (the naive client, wrk-style users that sleep between sends);
  3. repeatability: five runs of one point, p50 / p99 spread around their median (±3% / ±10% wanted).

The endpoint is a trivial asyncio HTTP/1.1 server (fixed 2-byte answer) in its own process on another core; the
clients run in this process pinned to one core (sched_setaffinity). `POST /stall` makes the server block for 1 s.

Optional comparators (never installed by CI):  `apt-get install wrk`  and  `.venv/bin/pip install locust`.
Usage: .venv/bin/python bench/loadgen.py [--duration 3] [--rates 1000 2000 4000 6000 8000] [--quick]
Ends with one line: RESULT loadgen key=value ...
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import aiohttp
import numpy as np

from common.procs import SupervisedProcess, free_port
from follower.cpuplan import generator_priority, isolate_generator_thread
from follower.loadgen.openloop import drive
from follower.loadgen.schedule import arrival_offsets_ns

SERVER = r'''
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
'''

LOCUSTFILE = '''
import os, random
from locust import task
from locust.contrib.fasthttp import FastHttpUser
RATE = float(os.environ["BENCH_RATE"]) / int(os.environ["BENCH_USERS"])
class U(FastHttpUser):
    wait_time = lambda self: random.expovariate(RATE)
    @task
    def post(self):
        self.client.post("/", data=b"x" * 16)
'''

BODY = [b'{"inputs":[{"name":"x","shape":[1],"datatype":"FP32","data":[1]}]}']


def pct(a: np.ndarray, q: float) -> float:
    return float(np.percentile(a, q)) if len(a) else float("nan")


def ours(url: str, rate: float, duration: float, seed: int) -> dict[str, float]:
    """Our generator: Poisson schedule, latency from the intended time."""
    offsets = arrival_offsets_ns("poisson", rate, duration, seed)
    cpu0 = time.process_time()
    rec = drive(url, BODY, offsets, max_concurrency=512)
    cpu = time.process_time() - cpu0
    ok = rec.ok
    lag = (rec.sent_ns[rec.sent] - rec.intended_ns[rec.sent]) / 1e6
    lat = (rec.done_ns[ok] - rec.intended_ns[ok]) / 1e6
    svc = (rec.done_ns[ok] - rec.sent_ns[ok]) / 1e6
    return {"achieved": ok.sum() / duration, "lag_p99": pct(lag, 99), "p50": pct(lat, 50), "p99": pct(lat, 99),
            "svc_p99": pct(svc, 99), "cpu_us": 1e6 * cpu / max(int(ok.sum()), 1), "n": float(ok.sum())}  # fmt: skip


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
    return {"achieved": len(a) / duration, "lag_p99": pct(np.maximum(g, 0), 99), "p50": pct(a, 50), "p99": pct(a, 99),
            "cpu_us": 1e6 * cpu / max(len(a), 1), "n": float(len(a))}  # fmt: skip


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
    out = subprocess.run(["taskset", "-c", str(core), exe, "-t1", "-c64", f"-d{max(int(duration), 1)}s", "--latency", url],
                         capture_output=True, text=True, timeout=duration + 30).stdout  # fmt: skip
    rps = re.search(r"Requests/sec:\s+([\d.]+)", out)
    p99 = re.search(r"99%\s+([\d.]+)(us|ms|s)", out)
    scale = {"us": 1e-3, "ms": 1.0, "s": 1e3}
    return {"achieved": float(rps.group(1)) if rps else float("nan"),
            "p99": float(p99.group(1)) * scale[p99.group(2)] if p99 else float("nan")}  # fmt: skip


def locust(url: str, rate: float, duration: float, core: int, tmp: Path) -> dict[str, float] | None:
    """Locust FastHttpUser, headless, users with exponential waits (its closest thing to Poisson), on one core."""
    exe = Path(sys.executable).with_name("locust")
    if not exe.exists():
        return None
    users = 64
    (tmp / "locustfile.py").write_text(LOCUSTFILE)
    env = {**os.environ, "BENCH_RATE": str(rate), "BENCH_USERS": str(users)}
    base = url.rsplit("/", 1)[0]
    t0 = time.monotonic()
    proc = subprocess.run(
        ["taskset", "-c", str(core), str(exe), "-f", str(tmp / "locustfile.py"), "--headless", "-u", str(users),
         "-r", str(users * 10), "-t", f"{max(int(duration), 1)}s", "-H", base, "--csv", str(tmp / "loc"), "--only-summary"],
        capture_output=True, text=True, timeout=duration + 60, env=env,
    )  # fmt: skip
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

    return {"achieved": num("Requests/s"), "p99": num("99%"),
            "wall_s": time.monotonic() - t0}  # fmt: skip


def valid(r: dict[str, float], rate: float) -> bool:
    return r["lag_p99"] < 1.0 and abs(r["achieved"] - rate) / rate <= 0.02


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", type=float, default=3.0)
    parser.add_argument("--rates", type=float, nargs="+", default=[1000, 2000, 4000, 6000, 8000, 10000])
    parser.add_argument("--stall-rate", type=float, default=500.0)
    parser.add_argument("--repeat-rate", type=float, default=1000.0)
    parser.add_argument("--quick", action="store_true", help="short runs (a smoke test of the bench itself)")
    parser.add_argument("--no-realtime", action="store_true", help="nice -10 instead of SCHED_FIFO (the old setting)")
    args = parser.parse_args()
    if args.quick:
        args.duration, args.rates = 1.0, [500, 1000]
    cores = sorted(os.sched_getaffinity(0))
    gen_core, srv_core = cores[0], cores[-1]
    if gen_core == srv_core:
        print("only one core: generator and server share it")
    os.sched_setaffinity(0, {gen_core})
    # Every client runs as the follower runs its generator: pinned, real-time where permitted (follower.cpuplan).
    isolate_generator_thread(frozenset({gen_core}), realtime=not args.no_realtime)
    print(f"clients' scheduling: {generator_priority()}")
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        (tmp / "server.py").write_text(textwrap.dedent(SERVER))
        port = free_port()
        url = f"http://127.0.0.1:{port}/"
        argv = [sys.executable, str(tmp / "server.py"), str(port), str(srv_core)]
        with SupervisedProcess(argv, name="trivial-http", log_path=tmp / "server.log") as server:
            server.wait_ready(lambda: "ready" in (tmp / "server.log").read_text(), 30)
            ours(url, 500, 0.5, seed=99)  # warm the path (imports, connections)
            results: dict[str, float] = {}

            print(f"== 1. rate ladder, Poisson, {args.duration:g} s per rate, generator on core {gen_core}, server on {srv_core}")
            print(f"{'client':8} {'target':>7} {'achieved':>9} {'lag p99 ms':>10} {'p99 ms':>8} {'CPU µs/req':>10}  valid")
            best: dict[str, float] = {"ours": 0.0, "naive": 0.0}
            cpu_us: dict[str, list[float]] = {"ours": [], "naive": []}
            for rate in args.rates:
                for name, fn in (("ours", lambda r: ours(url, r, args.duration, seed=int(r))),
                                 ("naive", lambda r: naive(url, r, args.duration, seed=int(r)))):  # fmt: skip
                    r = fn(rate)
                    ok = valid(r, rate)
                    cpu_us[name].append(r["cpu_us"])
                    if ok:
                        best[name] = max(best[name], rate)
                    row = f"{name:8} {rate:7.0f} {r['achieved']:9.0f} {r['lag_p99']:10.3f} {r['p99']:8.2f} {r['cpu_us']:10.0f}"
                    print(f"{row}  {ok}")
            w = wrk(url, args.duration, gen_core)
            print(f"wrk (closed loop, 64 conns, core {gen_core}): " + (f"{w['achieved']:.0f} req/s, p99 {w['p99']:.2f} ms" if w
                  else "not installed (apt-get install wrk)"))  # fmt: skip
            loc = locust(url, args.rates[0], args.duration, gen_core, tmp)
            print(f"locust FastHttpUser at {args.rates[0]:.0f} req/s target: " + (
                f"{loc['achieved']:.0f} req/s achieved, p99 {loc['p99']:.1f} ms (no send-lag figure: it has no schedule)"
                if loc else "not installed (.venv/bin/pip install locust)"))  # fmt: skip
            ratio = best["ours"] / best["naive"] if best["naive"] else float("nan")
            results.update(ours_max_rate=best["ours"], naive_max_rate=best["naive"], ours_vs_naive=ratio,
                           ours_cpu_us=float(np.median(cpu_us["ours"])), naive_cpu_us=float(np.median(cpu_us["naive"])),
                           wrk_rps=w["achieved"] if w else float("nan"),
                           locust_rps=loc["achieved"] if loc else float("nan"))  # fmt: skip

            stall_s = max(4.0, 2 * args.duration)
            print(f"\n== 2. 1 s server stall {stall_s / 2:g} s into a {stall_s:g} s run at {args.stall_rate:g} req/s")
            o = ours_with_stall(url, args.stall_rate, stall_s, stall_s / 2)
            # 8 users, as wrk-style tools run a few connections: only the one request per user in flight during the stall
            # is timed as slow; the requests the users did not send while they waited are never counted.
            n = naive(url, args.stall_rate, stall_s, seed=7, users=8, stall_at=stall_s / 2)
            print(f"ours  (from intended): p50 {o['p50']:8.2f} ms  p99 {o['p99']:8.2f} ms", end="")
            print(f"  (its service time p99 from the send {o['svc_p99']:.2f} ms)")
            print(f"naive (from send):     p50 {n['p50']:8.2f} ms  p99 {n['p99']:8.2f} ms")
            results.update(stall_ours_p99_ms=o["p99"], stall_naive_p99_ms=n["p99"],
                           stall_ratio=o["p99"] / n["p99"] if n["p99"] > 0 else float("nan"))  # fmt: skip

            print(f"\n== 3. repeatability: 5 runs at {args.repeat_rate:g} req/s, {args.duration:g} s each (same seed)")
            runs = [ours(url, args.repeat_rate, args.duration, seed=11) for _ in range(5)]
            p50s, p99s = np.array([r["p50"] for r in runs]), np.array([r["p99"] for r in runs])
            d50 = float(np.max(np.abs(p50s - np.median(p50s))) / np.median(p50s))
            d99 = float(np.max(np.abs(p99s - np.median(p99s))) / np.median(p99s))
            for i, r in enumerate(runs):
                print(f"run {i}: p50 {r['p50']:.3f} ms  p99 {r['p99']:.3f} ms  lag p99 {r['lag_p99']:.3f} ms")
            print(f"max deviation from median: p50 {100 * d50:.1f}% (want ≤ 3%), p99 {100 * d99:.1f}% (want ≤ 10%)")
            results.update(repeat_p50_dev=d50, repeat_p99_dev=d99)
            steal = _steal_share()
            if steal is not None:
                print(f"\nhypervisor steal on this host during the bench: {100 * steal:.1f}% of CPU time")
                results["steal"] = steal
    print("RESULT loadgen " + " ".join(f"{k}={v:.4g}" for k, v in results.items()))


_STEAL0: list[int] = []


def _cpu_steal() -> tuple[int, int]:
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return fields[7] if len(fields) > 7 else 0, sum(fields)


def _steal_share() -> float | None:
    if not _STEAL0:
        return None
    steal, total = _cpu_steal()
    return (steal - _STEAL0[0]) / max(total - _STEAL0[1], 1)


if __name__ == "__main__":
    _STEAL0.extend(_cpu_steal())
    main()
