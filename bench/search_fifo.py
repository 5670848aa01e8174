"""bench/search_fifo.py: the rate search of docs/decisions.md's example (10 to 400 req/s at 5% precision, probes of 2 s
warm-up and 12 s window), asked of a FIFO server of known capacity through the whole product, several times.

The server (tests/integration/follower/capacity_server.py --virtual) serves one request at a time, --service-ms each,
in virtual time: its capacity does not depend on this host's CPU. The truth is the knee of an M/D/1 queue over a
probe's own warm-up and window (tests/e2e/test_search.py's md1_knee): the rate at which a probe's p99 is at the limit
as often above as below. Each run is an endpoint job on a local leader and follower (the product's path). Printed per
run: every probe (load, the drain before it, p99 and its interval, verdict), the answer, its bracket and its stated
interval, whether the interval holds the knee. Ends with one line:

    RESULT search_fifo runs=N held=H knee=K answers=... coverage=H/N mean_abs_error_share=...

Run: `.venv/bin/python bench/search_fifo.py [--runs 3] [--service-ms 5] [--slo-ms 25] [--low 10] [--high 400]`.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchfleet.stack import LocalStack  # noqa: E402
from common.procs import free_port  # noqa: E402
from common.wire.jobs import TERMINAL_STATES, JobState  # noqa: E402
from common.wire.search import SearchAnswer  # noqa: E402
from tests.e2e.test_search import md1_knee, virtual_fifo  # noqa: E402


def job_yaml(args: argparse.Namespace, url: str, run: int) -> str:
    search = f"{{low: {args.low:g}, high: {args.high:g}, precision: {args.precision:g}, max_steps: {args.max_steps}}}"
    return f"""
name: fifo-search-{run}
model: fifo
inputs: [{{name: input, datatype: FP32, shape: [-1, 4]}}]
target: {{url: "{url}", protocol: kserve-http}}
load: {{pattern: poisson, duration: {args.duration:g}s, warmup: {args.warmup:g}s, search: {search}}}
slo: {{p99_ms: {args.slo_ms:g}}}
seed: {1000 + run}
"""


def search_once(stack: LocalStack, args: argparse.Namespace, url: str, run: int) -> tuple[SearchAnswer, float]:
    with stack.client() as client:
        started = time.monotonic()
        job = client.submit_yaml(job_yaml(args, url, run))
        while job.state not in TERMINAL_STATES:
            if time.monotonic() - started > 1800:
                raise TimeoutError(f"the search did not end in 30 minutes (state {job.state})")
            time.sleep(1)
            job = client.job(job.id)
        if job.state != JobState.succeeded:
            raise RuntimeError(f"the search job {job.state}: {job.error}")
        (point,) = client.results(job.id).points
    if point.search is None:
        raise RuntimeError("the search point carries no answer")
    return point.search, time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--service-ms", type=float, default=5.0)
    parser.add_argument("--slo-ms", type=float, default=25.0)
    parser.add_argument("--low", type=float, default=10)
    parser.add_argument("--high", type=float, default=400)
    parser.add_argument("--precision", type=float, default=0.05)
    parser.add_argument("--max-steps", type=int, default=10)
    parser.add_argument("--warmup", type=float, default=2.0)
    parser.add_argument("--duration", type=float, default=12.0)
    args = parser.parse_args()
    knee = md1_knee(args.service_ms / 1000, args.slo_ms / 1000, args.warmup, args.duration)
    ninety = md1_knee(args.service_ms / 1000, args.slo_ms / 1000, args.warmup, args.duration, passing=0.9)
    print(
        f"FIFO server, {args.service_ms:g} ms per request in virtual time (capacity {1000 / args.service_ms:g} req/s);"
        f" SLO p99 <= {args.slo_ms:g} ms; probes {args.warmup:g} s + {args.duration:g} s; search {args.low:g} to"
        f" {args.high:g} req/s at {args.precision:g}, at most {args.max_steps} probes"
    )
    print(f"M/D/1 knee over a probe's window: {knee:.1f} req/s (a probe passes half the time); 90% pass at {ninety:.1f}")
    answers, held, errors = [], 0, []
    with tempfile.TemporaryDirectory() as tmp, virtual_fifo(Path(tmp), args.service_ms) as url:
        stack = LocalStack(Path(tmp) / "fleet", env={"BENCHFLEET_FOLLOWER_METRICS_PORT": str(free_port())})
        with stack:
            stack.start_mongo()
            stack.start_redis()
            stack.start_leader()
            stack.start_follower("local")
            for run in range(args.runs):
                answer, wall = search_once(stack, args, url, run)
                low = answer.limit_low if answer.limit_low is not None else 0.0
                high = answer.limit_high if answer.limit_high is not None else float("inf")
                holds = low <= knee <= high
                bracket = answer.found is not None and answer.lowest_fail is not None
                in_bracket = bracket and answer.found <= knee <= answer.lowest_fail  # type: ignore[operator]
                held += holds
                answers.append(answer.found or 0.0)
                if answer.found is not None:
                    errors.append(abs(answer.found - knee) / knee)
                print(f"\nrun {run + 1}: {answer.summary()} ({wall:.0f} s)")
                for k, p in enumerate(answer.probes):
                    drain = "-" if p.drain_s is None else f"{p.drain_s:.2f} s"
                    print(
                        f"  probe {k}: {p.load:g} req/s, drain before {drain}, p99 {p.p99_ms or 0:.1f} ms"
                        f" (95% {p.p99_ci_ms}), passed {p.passed}{'' if p.valid else ' INVALID ' + '; '.join(p.reasons)}"
                    )
                print(
                    f"  stated interval [{low:g}, {high:g}] holds the knee {knee:.1f}: {holds} (the bracket alone: {in_bracket})"
                )
    error = sum(errors) / len(errors) if errors else float("nan")
    print(
        f"RESULT search_fifo runs={args.runs} held={held} knee={knee:.1f} answers={'/'.join(f'{a:g}' for a in answers)}"
        f" coverage={held}/{args.runs} mean_abs_error_share={error:.3f}"
    )


if __name__ == "__main__":
    main()
