"""Load shards on one host: 1, 2 and 4 follower processes drive one fast endpoint at once, through the whole system.

A leader (embedded database, Redis) and four followers run as processes; the endpoint is bench/fast_endpoint.py, a
KServe v2 HTTP server that answers at once, so the load generators are what limits a point. For each shard count a
job climbs a ladder of Poisson rates against the endpoint (target.shards: n; n = 1 is one follower), and for each
point this prints:

  - the achieved rate against the offered one (the merged point's, over its measured window);
  - exact: whether the merged point's latency percentiles equal those computed here from the shards' own raw
    records, fetched from the leader and concatenated (summarize_ns of the concatenation, compared with ==);
  - the shards' start skew (the spread of their first requests' lateness, from one common instant) and the largest
    clock-offset uncertainty;
  - valid, or why not.

Then the highest valid rate per shard count. On a host with C cores, shards help up to about C generators; past that
they share cores (with the endpoint and the fleet) and the highest valid rate stops rising: the figures say so.

    .venv/bin/python bench/shards.py [--ladder 500,1000,2000,3000,4000,6000] [--duration 3]

Ends with one line: RESULT shards key=value ...
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchfleet.client import BenchfleetClient  # noqa: E402
from benchfleet.stack import LocalStack  # noqa: E402
from common.procs import SupervisedProcess, free_port, http_ready  # noqa: E402
from common.stats import summarize_ns  # noqa: E402
from common.wire import records as fmt  # noqa: E402
from common.wire.jobs import TERMINAL_STATES, JobResults  # noqa: E402
from common.wire.results import PointResult  # noqa: E402

SHARD_COUNTS = (1, 2, 4)
FOLLOWERS = [f"gen-{k}" for k in range(max(SHARD_COUNTS))]


def wait_done(client: BenchfleetClient, job_id: str, timeout_s: float) -> JobResults:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        job = client.job(job_id)
        if job.state in TERMINAL_STATES:
            if job.state != "succeeded":
                raise SystemExit(f"job {job_id} ended {job.state}: {job.error}")
            return client.results(job_id)
        time.sleep(0.5)
    raise SystemExit(f"job {job_id} did not end within {timeout_s:g} s")


def measured_latencies(blob: bytes, point: PointResult) -> np.ndarray:
    arrays = fmt.decode(blob)
    keep = fmt.measured_mask(arrays, warmup_s=point.point.warmup_s, measured_s=point.measured_s) & (arrays["status"] == fmt.OK)
    return (arrays["done_ns"] - arrays["intended_ns"])[keep]


def exact(stack: LocalStack, job_id: str, point: PointResult, shards: int) -> bool:
    """Whether the point's percentiles are those of its shards' own records concatenated (one follower: its own)."""
    headers = {"Authorization": f"Bearer {stack.admin_token}"}
    i = point.point.index
    if shards == 1:
        urls = [f"{stack.url}/api/v1/jobs/{job_id}/points/{i}/records"]
    else:
        urls = [f"{stack.url}/api/v1/jobs/{job_id}/shards/{k}/points/{i}/records" for k in range(shards)]
    parts = []
    for url in urls:
        answer = httpx.get(url, headers=headers, timeout=30)
        answer.raise_for_status()
        parts.append(measured_latencies(answer.content, point))
    return summarize_ns(np.concatenate(parts)) == point.latency_ms


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ladder", default="1000,2000,4000,6000,8000,10000,12000", help="offered rates, req/s")
    parser.add_argument("--duration", type=float, default=3.0)
    args = parser.parse_args()
    ladder = [float(r) for r in args.ladder.split(",")]
    print(f"host: {os.cpu_count()} CPUs; shard counts {SHARD_COUNTS}; ladder {ladder} req/s, {args.duration:g} s each")
    figures: dict[str, float] = {}
    skews: list[float] = []
    with tempfile.TemporaryDirectory(prefix="bench-shards-") as tmp:
        work = Path(tmp)
        port = free_port()
        endpoint = SupervisedProcess(
            [sys.executable, str(ROOT / "bench" / "fast_endpoint.py"), "--port", str(port)],
            name="fast endpoint",
            log_path=work / "endpoint.log",
        )
        with endpoint, LocalStack(work / "fleet") as stack:
            endpoint.wait_ready(http_ready(f"http://127.0.0.1:{port}/v2/health/ready"), timeout_s=30)
            stack.start_mongo()
            stack.start_redis()
            stack.start_leader()
            for follower in FOLLOWERS:
                stack.start_follower(follower)
            with stack.client() as client:
                print(
                    f"{'shards':>6} {'offered':>8} {'achieved':>9} {'err %':>6} {'exact':>5} {'skew ms':>8} "
                    f"{'offset ±ms':>10}  verdict"
                )
                for n in SHARD_COUNTS:
                    shards = f", shards: {n}" if n > 1 else ""
                    job = client.submit_yaml(f"""
name: shards-{n}
model: fast
load: {{pattern: poisson, rate: [{", ".join(f"{r:g}" for r in ladder)}], duration: {args.duration:g}s, warmup: 1s}}
target: {{url: "http://127.0.0.1:{port}", protocol: kserve-http{shards}}}
""")
                    results = wait_done(client, job.id, timeout_s=120 + 20 * len(ladder) * (args.duration + 2))
                    best = 0.0
                    for point in results.points:
                        err = 100 * (point.achieved_rate / point.point.rate - 1)
                        same = exact(stack, job.id, point, n)
                        unsure = max((s.offset_uncertainty_ms or 0.0) for s in point.shards) if point.shards else None
                        if point.shard_skew_ms is not None:
                            skews.append(point.shard_skew_ms)
                        verdict = "valid" if point.valid else "; ".join(point.invalid_reasons)[:110]
                        skew = f"{point.shard_skew_ms:.3f}" if point.shard_skew_ms is not None else "-"
                        print(
                            f"{n:>6} {point.point.rate:>8g} {point.achieved_rate:>9.1f} {err:>6.2f} {str(same):>5} "
                            f"{skew:>8} {f'{unsure:.3f}' if unsure is not None else '-':>10}  {verdict}"
                        )
                        if point.point.rate == ladder[0]:
                            figures[f"rate_err_pct_{n}"] = round(err, 3)
                        figures[f"exact_{n}"] = min(figures.get(f"exact_{n}", 1), int(same))
                        if point.valid:
                            best = max(best, point.point.rate)
                    figures[f"max_valid_{n}"] = best
    figures["skew_p99_ms"] = round(float(np.percentile(skews, 99)), 4) if skews else float("nan")
    figures["skew_points"] = len(skews)
    for n in SHARD_COUNTS:
        print(f"{n} shard(s): highest valid rate {figures[f'max_valid_{n}']:g} req/s")
    print(f"start skew over {len(skews)} sharded points: p99 {figures['skew_p99_ms']} ms")
    print("RESULT shards " + " ".join(f"{k}={v:g}" for k, v in figures.items()))


if __name__ == "__main__":
    main()
