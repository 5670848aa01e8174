"""Does a repeated point drift when its runs share one process? Same process vs a fresh process per run.

bench/loadgen.py's repeatability section once showed p99 rising run after run (0.70 -> 1.62 ms, send-lag p99
0.097 -> 0.475 ms, 1000 req/s x 3 s, same seed, on a quiet 16-core host). This script repeats one point N times
(a) in this process, one after another, and (b) each in a fresh Python process, and prints beside every run what
could accumulate between runs: this process's RSS and GC-tracked objects, the TCP sockets in TIME_WAIT and
ESTABLISHED towards the server, the connections the run opened, the server process's RSS and CPU time, the
generator core's clock (where cpufreq is exposed), the generator thread's run-queue wait and hypervisor steal.

Usage: .venv/bin/python bench/loadgen_drift.py [--runs 5] [--rate 1000] [--duration 3] [--before-rate 15000]
`--before-rate R` first runs R req/s for the same duration (what the rate ladder leaves behind in bench/loadgen).
Ends with one line: RESULT loadgen_drift key=value ...
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import psutil

from follower.host.cpuplan import cpu_times, isolate_generator_thread, steal_share, thread_run_queue_ns
from follower.loadgen.openloop import drive
from follower.loadgen.schedule import arrival_offsets_ns
from follower.protocols.transports import rawhttp

sys.path.insert(0, str(Path(__file__).parent))
from loadgen_clients import BODY, slope, trivial, trivial_server  # noqa: E402  (bench/ is not a package)

_CONNECTS = [0]
_real_connect = rawhttp.RawHttpSession._connect


async def _counting_connect(self: rawhttp.RawHttpSession) -> rawhttp._Conn:
    _CONNECTS[0] += 1
    return await _real_connect(self)


rawhttp.RawHttpSession._connect = _counting_connect  # type: ignore[method-assign]


def tcp_states(port: int) -> dict[str, int]:
    """Sockets towards `port` on loopback by state (TIME_WAIT, ESTABLISHED), from /proc/net/tcp."""
    out = {"time_wait": 0, "established": 0}
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        f = line.split()
        if int(f[2].split(":")[1], 16) != port:  # remote port: the client side of each connection
            continue
        if f[3] == "06":
            out["time_wait"] += 1
        elif f[3] == "01":
            out["established"] += 1
    return out


def core_mhz(core: int) -> float | None:
    try:
        return int(Path(f"/sys/devices/system/cpu/cpu{core}/cpufreq/scaling_cur_freq").read_text()) / 1e3
    except (OSError, ValueError):
        return None


def one_run(url: str, port: int, rate: float, duration: float, seed: int, core: int, server_pid: int) -> dict:
    """One point with everything that could accumulate read just before it."""
    srv = psutil.Process(server_pid)
    before = {
        "rss_mb": psutil.Process().memory_info().rss / 2**20,
        "gc_objects": len(gc.get_objects()),
        "gc_gen2_collections": gc.get_stats()[2]["collections"],
        **tcp_states(port),
        "server_rss_mb": srv.memory_info().rss / 2**20,
        "server_cpu_s": sum(srv.cpu_times()[:2]),
        "core_mhz": core_mhz(core),
    }
    offsets = arrival_offsets_ns("poisson", rate, duration, seed)
    connects0, waited0, wall0, steal0 = _CONNECTS[0], thread_run_queue_ns(), time.monotonic_ns(), cpu_times()
    rec = drive(trivial(url), BODY, offsets, max_concurrency=512)
    waited1, wall1 = thread_run_queue_ns(), time.monotonic_ns()
    ok = rec.ok
    lat = (rec.done_ns[ok] - rec.intended_ns[ok]) / 1e6
    lag = (rec.sent_ns[rec.sent] - rec.intended_ns[rec.sent]) / 1e6
    return {
        **before,
        "p50": float(np.percentile(lat, 50)),
        "p99": float(np.percentile(lat, 99)),
        "lag_p99": float(np.percentile(lag, 99)),
        "n": int(ok.sum()),
        "connects": _CONNECTS[0] - connects0,
        "run_queue": (waited1 - waited0) / (wall1 - wall0) if waited0 is not None and waited1 is not None else None,
        "steal": steal_share(steal0, cpu_times()),
    }


def row(label: str, r: dict) -> str:
    mhz = f"{r['core_mhz']:6.0f}" if r["core_mhz"] else "     -"
    rq = f"{100 * r['run_queue']:5.1f}%" if r["run_queue"] is not None else "    -"
    st = f"{100 * r['steal']:4.1f}%" if r["steal"] is not None else "   -"
    return (
        f"{label:7} {r['p50']:6.3f} {r['p99']:6.3f} {r['lag_p99']:7.3f} {r['connects']:5d} {r['time_wait']:6d} "
        f"{r['established']:5d} {r['rss_mb']:6.1f} {r['gc_objects']:8d} {r['server_rss_mb']:6.1f} "
        f"{r['server_cpu_s']:7.2f} {mhz} {rq} {st}"
    )


HEAD = "run     p50 ms p99 ms lag p99 conns TIME_W estab RSS MB  gc objs srv MB srv cpu    MHz rqwait steal"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--rate", type=float, default=1000.0)
    p.add_argument("--duration", type=float, default=3.0)
    p.add_argument("--seed", type=int, default=11)
    p.add_argument("--before-rate", type=float, default=0.0)
    p.add_argument("--one", nargs=3, metavar=("URL", "PORT", "SERVER_PID"), help=argparse.SUPPRESS)
    args = p.parse_args()
    cores = sorted(os.sched_getaffinity(0))
    gen_core, srv_core = cores[0], cores[-1]
    os.sched_setaffinity(0, {gen_core})
    iso = isolate_generator_thread(frozenset({gen_core}))
    if args.one:  # a fresh process's single run: its figures as JSON on stdout
        url, port, pid = args.one[0], int(args.one[1]), int(args.one[2])
        print(json.dumps(one_run(url, port, args.rate, args.duration, args.seed, gen_core, pid)))
        return
    print(f"generator scheduling: {getattr(iso, 'scheduling', '?')}")
    with trivial_server(srv_core) as (url, port, server, _tmp):
        pid = server.pid
        drive(trivial(url), BODY, arrival_offsets_ns("poisson", 500, 0.5, 99), max_concurrency=512)  # warm the path
        if args.before_rate:
            one_run(url, port, args.before_rate, args.duration, 1, gen_core, pid)
        print(f"{args.runs} runs at {args.rate:g} req/s x {args.duration:g} s, seed {args.seed}")
        print(HEAD)
        same = [one_run(url, port, args.rate, args.duration, args.seed, gen_core, pid) for _ in range(args.runs)]
        for i, r in enumerate(same):
            print(row(f"same {i}", r))
        fresh = []
        for _ in range(args.runs):
            out = subprocess.run(
                [
                    sys.executable,
                    __file__,
                    "--rate",
                    str(args.rate),
                    "--duration",
                    str(args.duration),
                    "--seed",
                    str(args.seed),
                    "--one",
                    url,
                    str(port),
                    str(pid),
                ],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
            fresh.append(json.loads(out.strip().splitlines()[-1]))
        for i, r in enumerate(fresh):
            print(row(f"fresh {i}", r))

    def per_run(rs: list[dict], key: str) -> float:
        """Least-squares change per run, relative to the median (0 for a single run)."""
        return slope(np.array([r[key] for r in rs]))

    res = {
        "same_p99_slope": per_run(same, "p99"),
        "fresh_p99_slope": per_run(fresh, "p99"),
        "same_lag_slope": per_run(same, "lag_p99"),
        "fresh_lag_slope": per_run(fresh, "lag_p99"),
        "same_p99_med": float(np.median([r["p99"] for r in same])),
        "fresh_p99_med": float(np.median([r["p99"] for r in fresh])),
    }
    print(
        "p99 change per run (least squares, share of the median): "
        f"same process {100 * res['same_p99_slope']:+.1f}%, fresh processes {100 * res['fresh_p99_slope']:+.1f}%"
    )
    print("RESULT loadgen_drift " + " ".join(f"{k}={v:.4g}" for k, v in res.items()))


if __name__ == "__main__":
    main()
