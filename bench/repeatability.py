"""Repeatability of a real benchmark point: the same point run N times through the follower's runner.

bench/loadgen.py's section 3 repeats a point against a trivial ~0.1 ms endpoint, where 20 µs of host jitter is
already 15-20% of p50: it measures the host's jitter more than the point. This bench repeats what the issue means by
"the same point": `follower.point.runner.run_backend` with the onnxruntime backend serving a canonical model whose service
time is milliseconds (default fc depth 4 width 512, batch 8), Poisson at a moderate rate, the same seed every run,
the server started and stopped by the runner for every run (as one job's backend would be), warm-up then a measured
window of --duration seconds.

Each run is done twice, interleaved: with the CPUs' wake-up latency held at 0 µs (the follower's default,
follower/host/wakeup.py: idle CPUs poll) and with the host's own idle policy (idle CPUs halt), so the effect of the
host's idle states on the spread is a ratio measured in the same run (--no-compare: only the default).

Per run it prints the point's p50 / p99 as the runner reports them (HDR), the runner's 95% CI of the p99 (block
bootstrap over 0.1 s stretches, latency_ci_ms: tail latencies come in bursts, so resampling single requests would
understate the noise), the service time (done - sent) p50, the server's own timing of the model's run (inference
p50), the send-lag p99, the share of the run the generator waited for its core, hypervisor steal over the point's
run (the runner's figure, PointResult.host_steal_share), the share of the host's CPUs other processes used meanwhile
(busy time in /proc/stat less this process tree's) and the runner's validity verdict with its reasons. Then, per mode, the largest
deviation of p50 and p99 from their median beside one run's CI, and the verdict a spec's `repeats` gives the same runs
(common/wire/repeats.py: the CV of p50/p99, and whether the runs' CIs explain their spread or the machine changed between
runs). Nothing is asserted and nothing is tuned to pass.

Usage: .venv/bin/python bench/repeatability.py [--runs 5] [--rate 250] [--duration 20] [--warmup 3]
       [--depth 4] [--width 512] [--batch 8] [--no-compare] [--one-server] [--quick]
Ends with one line: RESULT repeatability key=value ...
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

from common.spec.grid import expand
from common.spec.job import PointSpec
from common.spec.parse import parse_spec
from common.wire.repeats import RepeatSummary, summarize_repeats
from common.wire.results import PointResult
from follower.convert.canonical import CanonicalSpec, generate, local_model
from follower.loadgen.records import LoadRecords
from follower.loadgen.verdict import WindowSummary
from follower.point.context import ServerRun
from follower.point.runner import run_backend

sys.path.insert(0, str(Path(__file__).parent))
from loadgen_clients import pct, slope, spread  # noqa: E402  (bench/ is not a package)


def _host_cpu() -> tuple[float, float]:
    """(busy, total) CPU seconds of all CPUs since boot, from /proc/stat (busy: user nice system irq softirq)."""
    with open("/proc/stat", encoding="ascii") as fh:
        user, nice, system, idle, iowait, irq, softirq, steal = (int(v) for v in fh.readline().split()[1:9])
    hz = os.sysconf("SC_CLK_TCK")
    return (user + nice + system + irq + softirq) / hz, (user + nice + system + idle + iowait + irq + softirq + steal) / hz


def _own_cpu() -> float:
    """CPU seconds of this process and its reaped children (the runner's model servers, once stopped)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def run_points(
    point_spec: dict, model_path: Path, workdir: Path, canon: tuple, wakeup_latency_us: int | None, repeats: int = 1
) -> list[tuple[PointResult, dict[str, float]]]:
    """`repeats` runs of the point through one runner call (one server start), each with its raw-record figures.

    Each run's steal is the runner's own (PointResult.host_steal_share); other processes' share of the host is
    measured over the whole call.
    """
    bundle, meta = canon
    model = local_model(bundle, meta, "canon")
    (point,) = expand(parse_spec(point_spec))
    points = [point.model_copy(update={"index": i}) for i in range(repeats)]
    seen: list[tuple[PointSpec, LoadRecords, WindowSummary]] = []

    async def collect() -> list[PointResult]:
        return [
            r
            async for r in run_backend(
                "onnxruntime",
                points,
                ServerRun(
                    model=model,
                    model_path=model_path,
                    workdir=workdir,
                    slo=None,
                    wakeup_latency_us=wakeup_latency_us,
                    records_sink=lambda p, rec, s, probe=None: seen.append((p, rec, s)),
                ),
            )
        ]

    host0, own0 = _host_cpu(), _own_cpu()
    results = asyncio.run(collect())
    host1, own1 = _host_cpu(), _own_cpu()
    # Whatever else ran on the host meanwhile (other engineers' tests, CI, installs): its share of all CPUs.
    others = max(host1[0] - host0[0] - (own1 - own0), 0.0) / max(host1[1] - host0[1], 1e-9)
    out = []
    for result, (point, records, _) in zip(results, seen, strict=True):
        # The measured window exactly as the runner cut it: warm-up first, then duration_s (no stability rule here).
        start = records.start_ns + int(round(point.warmup_s * 1e9))
        w = records.window(start, start + int(round(point.duration_s * 1e9)))
        ok = w.ok
        svc = (w.done_ns[ok] - w.sent_ns[ok]) / 1e6
        infer = w.stages_ns["infer_ns"][ok] / 1e6  # the server's own timing of the model's run (-1: not reported)
        infer = infer[infer >= 0]
        steal, runq = result.host_steal_share, result.generator_run_queue_share
        out.append(
            (
                result,
                {
                    "svc_p50": pct(svc, 50),
                    "infer_p50": pct(infer, 50),
                    "n": float(ok.sum()),
                    "others": others,
                    "steal": float("nan") if steal is None else steal,
                    "runq": float("nan") if runq is None else runq,
                },
            )
        )
    return out


def print_row(label: str, r: PointResult, x: dict[str, float]) -> None:
    """One run: its figures and the runner's verdict."""
    lat, lag = r.latency_ms, r.send_lag_ms
    ci = (r.latency_ci_ms or {}).get("p99")
    ci_text = f"{ci[0]:.2f}-{ci[1]:.2f}" if ci else "-"
    verdict = "valid" if r.valid else "INVALID: " + "; ".join(r.invalid_reasons)
    print(
        f"{label:>8} {lat.p50 if lat else np.nan:7.3f} {lat.p99 if lat else np.nan:7.3f} {ci_text:>12} "
        f"{x['svc_p50']:7.3f} {x['infer_p50']:7.3f} {lag.p99 if lag else np.nan:7.3f} {x['n']:7.0f} {100 * x['runq']:6.2f} "
        f"{100 * x['steal']:6.2f} {100 * x['others']:7.1f}  {verdict}"
    )


def report(title: str, rows: list[tuple[PointResult, dict[str, float]]]) -> dict[str, float]:
    """The spread of one series of runs, the product's verdict on it, and its figures."""
    p50s = np.array([r.latency_ms.p50 if r.latency_ms else np.nan for r, _ in rows])
    p99s = np.array([r.latency_ms.p99 if r.latency_ms else np.nan for r, _ in rows])
    cis = [(r.latency_ci_ms or {}).get("p99") for r, _ in rows]
    ci_rel = float(
        np.median([(c[1] - c[0]) / 2 / r.latency_ms.p99 for (r, _), c in zip(rows, cis, strict=True) if c and r.latency_ms])
    )
    d50, d99 = spread(p50s), spread(p99s)
    steals = np.array([x["steal"] for _, x in rows])
    others = np.array([x["others"] for _, x in rows])
    n_valid = sum(r.valid for r, _ in rows)
    print(
        f"{title}: median p50 {np.median(p50s):.3f} ms, p99 {np.median(p99s):.3f} ms; max deviation from the median: "
        f"p50 {100 * d50:.1f}%, p99 {100 * d99:.1f}%; p99 drift {100 * slope(p99s):+.1f}%/run; one run's p99 CI "
        f"(block bootstrap, median half-width) ±{100 * ci_rel:.1f}%"
    )
    # The product's own verdict on these runs (a spec's `repeats` gives the same): common/wire/repeats.py.
    (judged,) = summarize_repeats([r for r, _ in rows]) or [None]
    if judged is not None:
        print(f"  repeats verdict: {judged.verdict}: {judged.text}")
    print(
        f"  steal per run {', '.join(f'{100 * s:.1f}%' for s in steals)}; other processes' share of the host's CPUs "
        f"per run {', '.join(f'{100 * o:.0f}%' for o in others)}; {n_valid}/{len(rows)} runs valid"
    )
    if len(rows) > 2 and np.ptp(steals) > 0:
        # Whether the runs' differences follow what the hypervisor took: a machine effect, not the point's.
        r50, r99 = np.corrcoef(steals, p50s)[0, 1], np.corrcoef(steals, p99s)[0, 1]
        print(f"  correlation across runs of steal with p50 r = {r50:+.2f}, with p99 r = {r99:+.2f}")
    infers = np.array([x["infer_p50"] for _, x in rows])
    if len(rows) > 2 and np.ptp(infers) > 0:
        # The model's own run time inside the server: if it moves with p50, the CPU got slower, not the path to it.
        print(
            f"  server-timed inference p50 per run {', '.join(f'{v:.3f}' for v in infers)} ms (spread "
            f"{100 * spread(infers):.1f}%); its correlation with p50 r = {np.corrcoef(infers, p50s)[0, 1]:+.2f}"
        )
    return {
        "p50_dev": d50,
        "p99_dev": d99,
        "p99_ci": ci_rel,
        "p99_slope": slope(p99s),
        "p50_med_ms": float(np.median(p50s)),
        "p99_med_ms": float(np.median(p99s)),
        "svc_p50_med_ms": float(np.median([x["svc_p50"] for _, x in rows])),
        "infer_p50_dev": spread(infers),
        "steal_max": float(np.nanmax(steals)),
        "others_max": float(np.max(others)),
        "valid_runs": float(n_valid),
        "runs": float(len(rows)),
        "p50_cv": _cv(judged, 0),
        "p99_cv": _cv(judged, 1),
        "p99_p": _p(judged, 1),
        "changed": float(judged is not None and judged.verdict == "machine_changed"),
    }


def _cv(judged: RepeatSummary | None, i: int) -> float:
    return float("nan") if judged is None or judged.metrics[i].cv is None else float(judged.metrics[i].cv)


def _p(judged: RepeatSummary | None, i: int) -> float:
    return float("nan") if judged is None or judged.metrics[i].p_value is None else float(judged.metrics[i].p_value)


def main() -> int:
    """Run the point --runs times per mode (interleaved), print a row per run, the spreads and the RESULT line."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--rate", type=float, default=250.0)
    parser.add_argument("--duration", type=float, default=20.0, help="measured seconds per run")
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--depth", type=int, default=4)
    parser.add_argument("--width", type=int, default=512)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument(
        "--no-compare",
        action="store_true",
        help="only the follower's default (wake-up latency held at 0 µs), not the halting host too",
    )
    parser.add_argument(
        "--one-server",
        action="store_true",
        help="run each mode's runs as points of one runner call (one server start), not a restart per run",
    )
    parser.add_argument("--quick", action="store_true", help="two short runs (a smoke test of the bench itself)")
    args = parser.parse_args()
    if args.quick:
        args.runs, args.duration, args.warmup = 2, 2.0, 0.5
    canon = generate(CanonicalSpec("fc", depth=args.depth, width=args.width, input_size=32))
    point_spec = {
        "name": "repeat",
        "model": "canon:1",
        "backends": ["onnxruntime"],
        "batch_sizes": [args.batch],
        "seed": args.seed,
        "load": {"pattern": "poisson", "rate": args.rate, "duration": args.duration, "warmup": args.warmup},
    }
    # "held": the follower's default (PM QoS 0 µs: idle CPUs poll); "halting": the host's own idle policy.
    modes: dict[str, int | None] = {"held": 0} if args.no_compare else {"held": 0, "halting": None}
    print(
        f"point: onnxruntime, canonical fc depth {args.depth} width {args.width}, batch {args.batch}, Poisson "
        f"{args.rate:g} req/s, warm-up {args.warmup:g} s + {args.duration:g} s measured, seed {args.seed}; "
        f"{args.runs} runs per mode ({', '.join(modes)}; "
        + ("one server per mode" if args.one_server else "interleaved, server restarted per run")
        + "); ms"
    )
    print(
        f"{'run':>8} {'p50':>7} {'p99':>7} {'p99 95% CI':>12} {'svc p50':>7} {'inf p50':>7} {'lag p99':>7} {'samples':>7} "
        f"{'runq%':>6} {'steal%':>6} {'others%':>7}  verdict"
    )
    rows: dict[str, list[tuple[PointResult, dict[str, float]]]] = {mode: [] for mode in modes}
    with tempfile.TemporaryDirectory(prefix="bench-repeat-") as tmpdir:
        tmp = Path(tmpdir)
        model_path = tmp / "canon.zip"
        model_path.write_bytes(canon[0])
        if args.one_server:
            for mode, wakeup_us in modes.items():
                rows[mode] = run_points(point_spec, model_path, tmp / mode, canon, wakeup_us, repeats=args.runs)
                for i, (r, x) in enumerate(rows[mode]):
                    print_row(f"{mode} {i}", r, x)
        else:
            for i in range(args.runs):
                for mode, wakeup_us in modes.items():
                    ((r, x),) = run_points(point_spec, model_path, tmp / f"{mode}{i}", canon, wakeup_us)
                    rows[mode].append((r, x))
                    print_row(f"{mode} {i}", r, x)
    res: dict[str, float] = {}
    for mode in modes:
        figures = report(f"{mode} ({rows[mode][0][0].cpu_wakeup_latency})", rows[mode])
        prefix = "repeat" if mode == "held" else "halt"
        res.update({f"{prefix}_{k}": v for k, v in figures.items()})
    if "halting" in modes:
        res["halt_vs_held_p50_dev"] = res["halt_p50_dev"] / max(res["repeat_p50_dev"], 1e-9)
        res["halt_vs_held_p99_dev"] = res["halt_p99_dev"] / max(res["repeat_p99_dev"], 1e-9)
    print("RESULT repeatability " + " ".join(f"{k}={v:.4g}" for k, v in res.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
