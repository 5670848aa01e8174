"""A server of known capacity at 80%, 110% and 150% of it: what the generator reports against queueing theory.

The server (tests/integration/follower/capacity_server.py) answers one request at a time, each taking --service-ms.
Its real capacity is calibrated first: eight users back to back keep it busy, so their throughput is its capacity μ
and 1/μ the time it is occupied per request; one user alone gives the round trip (the occupancy plus the client's
and the network's share) and its spread. Then Poisson loads at 80%, 110% and 150% of μ, each judged by the
follower's own verdict (follower.loadgen.verdict):

  - the achieved throughput must never exceed the capacity (what the server served, not what was offered);
  - past capacity, the verdict must name the server as the limit (server_saturated), never the generator;
  - latency from the intended time must match queueing theory within 10%: below capacity the M/G/1 mean
    (Pollaczek-Khinchine: the round trip plus λE[S²] / 2(1-ρ) of queueing); past it, a queue growing at λ-μ from
    empty over the run (the mean wait of arrivals spread over [0, T] is (λ-μ)T / 2μ, plus the round trip).

Then 300%, whose backlog (twice the run's length of work) outlasts the point's drain bound (common.spec.grid: its
duration): the run must end at the bound, the cut requests named (unanswered). The four runs are an overloaded sweep:
its wall time is printed against the job estimate (the runs' seconds) and estimate_max (plus each drain bound).

Run alone (`.venv/bin/python bench/capacity.py`) or as section 4 of bench/loadgen.py. Ends with one line:
RESULT capacity key=value ...
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from common.procs import SupervisedProcess, free_port, http_ready  # noqa: E402
from common.spec.grid import drain_bound_s  # noqa: E402
from follower.loadgen.closedloop import drive_closed  # noqa: E402
from follower.loadgen.openloop import drive  # noqa: E402
from follower.loadgen.schedule import arrival_offsets_ns  # noqa: E402
from follower.loadgen.verdict import backlog, delivered_rate, summarize_window, window_reasons  # noqa: E402
from follower.protocols import Endpoint  # noqa: E402

SERVER = ROOT / "tests" / "integration" / "follower" / "capacity_server.py"
BODY = [b'{"inputs": []}']
LOADS = (0.8, 1.1, 1.5, 3.0)
BEYOND_THEORY = 2.0  # from here the backlog outlasts the drain bound: the answered requests are not all of them


def theory_ms(rate: float, mean_s: float, second_s2: float, round_trip_s: float, duration_s: float) -> float:
    """Mean latency (ms) under Poisson load `rate` of a single FIFO server occupied E[S] (second moment E[S²]) per
    request, answering in `round_trip_s` when idle."""
    rho = rate * mean_s
    if rho < 1:
        return 1e3 * (round_trip_s + rate * second_s2 / (2 * (1 - rho)))
    mu = 1 / mean_s
    return 1e3 * (round_trip_s + (rate - mu) * duration_s / (2 * mu))


def run(service_ms: float, duration_s: float, gen_core: int | None, srv_core: int | None) -> dict[str, float]:
    """Calibrate, then the three loads; prints a row each and returns the RESULT figures."""
    results: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="bench-capacity-") as tmp:
        port = free_port()
        argv = [sys.executable, str(SERVER), "--port", str(port), "--service-ms", str(service_ms), "--workers", "1"]
        if srv_core is not None:
            argv = ["taskset", "-c", str(srv_core), *argv]
        with SupervisedProcess(argv, name="capacity server", log_path=Path(tmp) / "server.log") as server:
            server.wait_ready(http_ready(f"http://127.0.0.1:{port}/ready"), timeout_s=30)
            url = Endpoint("kserve-http", f"http://127.0.0.1:{port}", "m")
            if gen_core is not None:
                os.sched_setaffinity(0, {gen_core})
            busy = drive_closed(url, BODY, 8, int(3e9))
            capacity = int(busy.ok.sum()) / ((busy.done_ns[busy.ok].max() - busy.start_ns) / 1e9)
            alone = drive_closed(url, BODY, 1, int(3e9))
            trips = (alone.done_ns[alone.ok] - alone.sent_ns[alone.ok]) / 1e9
            mean_s, round_trip_s = 1 / capacity, float(trips.mean())
            second_s2 = mean_s**2 + float(trips.var())  # the occupancy's spread is the round trip's
            print(
                f"calibration: capacity {capacity:.1f} req/s (8 users; nominal {1000 / service_ms:.0f}), occupancy "
                f"{1e3 * mean_s:.3f} ms, round trip {1e3 * round_trip_s:.3f} ms (1 user)"
            )
            results["capacity_rps"] = capacity
            print(
                f"{'load':>5} {'offered':>8} {'achieved':>9} {'/cap':>6} {'mean ms':>9} {'theory':>9} {'err':>6} "
                f"{'wall s':>6}  verdict"
            )
            drain_s, sweep_s = drain_bound_s(duration_s), 0.0
            for load in LOADS:
                rate = load * capacity
                offsets = arrival_offsets_ns("poisson", rate, duration_s, seed=int(load * 100))
                rec = drive(url, BODY, offsets, max_concurrency=4096, timeout_s=120, drain_s=drain_s)
                sweep_s += rec.wall_s
                start, end = rec.start_ns, rec.start_ns + int(duration_s * 1e9)
                window = rec.window(start, end)
                summary = summarize_window(
                    window,
                    duration_s,
                    delivered_rate=delivered_rate(rec, start, end),
                    backlog=backlog(rec, start, end, 1_000_000_000),
                )
                codes = [r.code for r in window_reasons(summary, 4096)]
                answered = window.ok
                mean_ms = float(((window.done_ns[answered] - window.intended_ns[answered]) / 1e6).mean())
                want = theory_ms(rate, mean_s, second_s2, round_trip_s, duration_s)
                err = mean_ms / want - 1
                tag = f"{int(round(load * 100))}"
                theory = load < BEYOND_THEORY
                print(
                    f"{tag:>4}% {summary.offered_rate:8.1f} {summary.achieved_rate:9.1f} "
                    f"{summary.achieved_rate / capacity:6.3f} {mean_ms:9.2f} {want if theory else float('nan'):9.2f} "
                    f"{100 * err if theory else float('nan'):+5.1f}% {rec.wall_s:6.1f}  "
                    f"{', '.join(codes) or 'valid'}"
                )
                results[f"achieved_over_capacity_{tag}"] = summary.achieved_rate / capacity
                if theory:
                    results[f"latency_err_{tag}"] = err
                else:
                    results[f"unanswered_named_{tag}"] = float("unanswered" in codes)
                results[f"server_named_{tag}"] = float("server_saturated" in codes)
                results[f"generator_blamed_{tag}"] = float("send_lag" in codes)
            estimate_s, most_s = len(LOADS) * duration_s, len(LOADS) * (duration_s + drain_s)
            print(
                f"overloaded sweep: {sweep_s:.1f} s of runs; estimate {estimate_s:.0f} s, estimate_max {most_s:.0f} s "
                f"(each run's drain bound {drain_s:g} s)"
            )
            results.update(sweep_s=sweep_s, sweep_over_estimate=sweep_s / estimate_s, sweep_over_estimate_max=sweep_s / most_s)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--service-ms", type=float, default=4.0)
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per load")
    args = parser.parse_args()
    cores = sorted(os.sched_getaffinity(0))
    results = run(args.service_ms, args.duration, cores[0], cores[-1] if len(cores) > 1 else None)
    print("RESULT capacity " + " ".join(f"{k}={v:.4g}" for k, v in results.items()))


if __name__ == "__main__":
    main()
