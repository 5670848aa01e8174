"""Where the open-loop generator's send lag comes from, measured part by part on one generator core.

Against the trivial HTTP server of bench/loadgen.py (its own core), at each rate, Poisson, the same seed:
  full       the generator as it runs in a job (sent - intended);
  dispatch   the same run split in two: dispatcher wake-up late (dispatch - intended) and the hop from the
             dispatcher to the request's send (sent - dispatch: task start, cap, connection pick);
  timer      the dispatcher alone (no request sent): timerfd + spin wake-up lateness under the same schedule;
  spin=N     the full run with the "busy" timer, its timerfd armed a fixed N µs before each send (the default adapts);
  nice       the full run with the generator thread at nice -10, as the follower runs it in a job (root/CAP_SYS_NICE);
  group      the full run with this process's autogroup at nice -10 (/proc/self/autogroup; thread nice alone
             does not count against other sessions' processes where kernel.sched_autogroup_enabled=1);
  fifo       the full run with the generator thread under SCHED_FIFO (real-time: no normal process preempts it);
plus, for every run: GC collections while requests were due (the collector is disabled for the run), CPU per
request, the hypervisor steal share while it ran (/proc/stat), and run-queue wait: the share of the run the
generator thread was runnable but another process held its core (/proc/thread-self/schedstat).

Usage: .venv/bin/python bench/send_lag_causes.py [--rates 2000 5000] [--duration 4] [--repeats 2]
Ends with one line: RESULT send_lag_causes key=value ...
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from follower.host.cpuplan import GENERATOR_NICE, cpu_times, steal_share
from follower.loadgen import openloop, timing
from follower.loadgen.openloop import drive
from follower.loadgen.schedule import arrival_offsets_ns

sys.path.insert(0, str(Path(__file__).parent))
from loadgen_clients import BODY, trivial, trivial_server  # noqa: E402  (bench/ is not a package: run as a script, as its usage says)


def pct(a: np.ndarray, q: float) -> float:
    return float(np.percentile(a, q)) if len(a) else float("nan")


def one(url: str, rate: float, duration: float, seed: int, variant: str) -> dict[str, float]:
    """One run of `variant`; lag figures in ms."""
    offsets = arrival_offsets_ns("poisson", rate, duration, seed)
    dispatch = np.full(len(offsets), -1, dtype=np.int64)
    original_launch = openloop._Driver.launch
    original_spin = timing.BUSY_TAIL_NS
    timer: timing.Timer = "yield"
    collections = [0]

    gc_at: list[int] = []

    def on_gc(phase: str, info: dict) -> None:
        if phase == "start":
            gc_at.append(time.monotonic_ns())

    def launch_recording(self: openloop._Driver, i: int) -> None:
        dispatch[i] = time.monotonic_ns()
        original_launch(self, i)

    def launch_nothing(self: openloop._Driver, i: int) -> None:
        now = time.monotonic_ns()
        self.rec.sent_ns[i] = now
        self.rec.done_ns[i] = now
        self.rec.status[i] = 200

    patch: Callable[..., None] | None = None
    if variant == "dispatch":
        patch = launch_recording
    elif variant == "timer":
        patch = launch_nothing
    elif variant.startswith("spin="):
        timing.BUSY_TAIL_NS, timer = int(variant.split("=", 1)[1]) * 1000, "busy"
    undo = _priority(variant)
    if patch is not None:
        openloop._Driver.launch = patch  # type: ignore[method-assign]
    gc.callbacks.append(on_gc)
    before = cpu_times()
    sched0, wall0 = _schedstat(), time.monotonic_ns()
    try:
        rec = drive(trivial(url), BODY, offsets, max_concurrency=512, timer=timer)
    finally:
        gc.callbacks.remove(on_gc)
        openloop._Driver.launch = original_launch  # type: ignore[method-assign]
        timing.BUSY_TAIL_NS = original_spin
        undo()
    steal = steal_share(before, cpu_times()) or 0.0
    sched1, wall = _schedstat(), time.monotonic_ns() - wall0
    # Collections while requests were being sent (the run's own gc.disable() should leave none).
    end_ns = rec.start_ns + int(offsets[-1]) if len(offsets) else rec.start_ns
    collections[0] = sum(1 for t in gc_at if rec.start_ns <= t <= end_ns)
    sent = rec.sent
    lag = (rec.sent_ns[sent] - rec.intended_ns[sent]) / 1e6
    out = {
        "lag_p50": pct(lag, 50),
        "lag_p99": pct(lag, 99),
        "cpu_us": 1e6 * rec.cpu_s / max(int(sent.sum()), 1),
        "cpu_share": rec.cpu_share,
        "steal": steal,
        "gc": float(collections[0]),
        "n": float(sent.sum()),
        # Time this thread was runnable but waiting for a CPU (other processes on its core), over the run's wall.
        "runq": (sched1[1] - sched0[1]) / wall if sched0 and sched1 else float("nan"),
        "slices": float(sched1[2] - sched0[2]) if sched0 and sched1 else float("nan"),
    }
    if variant == "dispatch":
        d = dispatch >= 0
        out["wake_p99"] = pct((dispatch[d] - rec.intended_ns[d]) / 1e6, 99)
        both = d & sent
        out["hop_p50"] = pct((rec.sent_ns[both] - dispatch[both]) / 1e6, 50)
        out["hop_p99"] = pct((rec.sent_ns[both] - dispatch[both]) / 1e6, 99)
    return out


def _priority(variant: str) -> Callable[[], None]:
    """nice: this thread at the follower's GENERATOR_NICE (what isolate_generator_thread applies in a job); fifo:
    SCHED_FIFO, which no normal process preempts. Both need CAP_SYS_NICE; returns an undo."""
    if variant == "nice":
        os.setpriority(os.PRIO_PROCESS, 0, GENERATOR_NICE)
        return lambda: os.setpriority(os.PRIO_PROCESS, 0, 0)
    if variant == "group":  # with autogroups on, a thread's nice only counts inside its own session's group
        _write_autogroup(GENERATOR_NICE)
        return lambda: _write_autogroup(0)
    if variant == "fifo":
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
        return lambda: os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
    return lambda: None


def _write_autogroup(nice: int) -> None:
    with open("/proc/self/autogroup", "w", encoding="ascii") as fh:
        fh.write(str(nice))


def _schedstat() -> tuple[int, int, int] | None:
    """(on-CPU ns, run-queue wait ns, timeslices) of the calling thread, from /proc/thread-self/schedstat."""
    try:
        with open("/proc/thread-self/schedstat", encoding="ascii") as fh:
            a, b, c = (int(v) for v in fh.read().split()[:3])
    except (OSError, ValueError):
        return None
    return a, b, c


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rates", type=float, nargs="+", default=[2000, 5000])
    parser.add_argument("--duration", type=float, default=4.0)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--variants", nargs="+", default=["full", "dispatch", "timer", "spin=50", "spin=500"])
    args = parser.parse_args()
    cores = sorted(os.sched_getaffinity(0))
    gen_core, srv_core = cores[0], cores[-1]
    os.sched_setaffinity(0, {gen_core})
    with trivial_server(srv_core) as (url, _port, _server, _tmp):
        one(url, 500, 0.5, 99, "full")  # warm the path (imports, connections)
        print(f"generator on core {gen_core}, server on core {srv_core}; Poisson, {args.duration:g} s per run; ms")
        heads = (
            "variant",
            "rate",
            "lag p50",
            "lag p99",
            "wake p99",
            "hop p50",
            "hop p99",
            "µs/req",
            "cpu%",
            "steal%",
            "runq%",
            "gc",
        )
        print(" ".join(f"{h:>9}" for h in heads))
        results: dict[str, float] = {}
        for rate in args.rates:
            for variant in args.variants:
                rows = [one(url, rate, args.duration, seed, variant) for seed in range(args.repeats)]
                for r in rows:
                    cells = [
                        r["lag_p50"],
                        r["lag_p99"],
                        r.get("wake_p99", float("nan")),
                        r.get("hop_p50", float("nan")),
                        r.get("hop_p99", float("nan")),
                        r["cpu_us"],
                        100 * r["cpu_share"],
                        100 * r["steal"],
                        100 * r["runq"],
                        r["gc"],
                    ]
                    print(f"{variant:>9} {rate:9.0f} " + " ".join(f"{c:9.3f}" for c in cells))
                key = variant.replace("=", "")
                results[f"{key}_lag_p99_ms_{rate:.0f}"] = float(np.median([r["lag_p99"] for r in rows]))
                results[f"{key}_steal_{rate:.0f}"] = float(np.median([r["steal"] for r in rows]))
                results[f"{key}_runq_{rate:.0f}"] = float(np.median([r["runq"] for r in rows]))
                if variant == "dispatch":
                    results[f"hop_p99_ms_{rate:.0f}"] = float(np.median([r["hop_p99"] for r in rows]))
                    results[f"wake_p99_ms_{rate:.0f}"] = float(np.median([r["wake_p99"] for r in rows]))
        print("RESULT send_lag_causes " + " ".join(f"{k}={v:.4g}" for k, v in results.items()))


if __name__ == "__main__":
    main()
