"""The SLO search on synthetic curves of known knee: probes to an answer and the answer's error against the truth,
for benchfleet's search (follower/point/searchplan.py: bracket, then the PCHIP root of the SLO margin), plain
geometric bisection on the same plan, the search benchfleet had before (linear bisection, the ceiling first, 8
probes), and vLLM 0.32's sweep explorer (`vllm bench sweep serve_workload`: evenly spaced loads between its two
ends; the SLA search `serve_sla` is gone from that version), counted as the probes it needs for the same resolution.

Curves (margin against load; > 0 meets the SLO): a queue's p99 (p99 = base / (1 - load/capacity), 5x base at the
knee), a smooth power law, and a cliff; knees at 2%, 10%, 20%, 50% and 90% of [10, 1000] req/s; each probe's margin
carries Gaussian noise (sd 0.03 of the limit: a p99 over ~2,000 requests), and a probe reads `uncertain` when the
noise-free margin lies within two sds of zero (its interval straddles the limit), as the follower's CI does.

With --real (a second part, minutes): the same question against a real vLLM (CPU build, the canonical LLM), once by
benchfleet (an endpoint job on a local leader and follower: a rate search whose criterion is attainment >= 0.99 of
TTFT <= the limit, i.e. p99 TTFT <= the limit) and once by vLLM 0.16's `vllm bench sweep serve_sla` (the last vLLM
with it; bench/install_peers.sh puts it in its own environment) on the same running server, its SLA `p99_ttft_ms <=
the limit` over request_rate, each of its probes a `vllm bench serve` run from vLLM 0.32's environment. Per tool: the
probes, the server-minutes its probes held the server, its answer and bracket, and how far the answers lie apart.

Run: `.venv/bin/python bench/search.py [--real]`. Ends with one line: RESULT search key=value ...
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from common.spec.load import SearchSpec  # noqa: E402
from follower.point.searchplan import Narrow, Reading, SearchPlan, bisect, interpolate  # noqa: E402

LOW, HIGH, PRECISION = 10.0, 1000.0, 0.05
SHARES = (0.02, 0.1, 0.2, 0.5, 0.9)
NOISE = 0.03
TRIALS = 40

Curve = Callable[[float], float]


def queue(knee: float) -> Curve:
    capacity = knee / 0.8
    return lambda x: 1 - 0.2 / (1 - x / capacity) if x < capacity else -10.0


def power(knee: float) -> Curve:
    return lambda x: 1 - (x / knee) ** 2


def cliff(knee: float) -> Curve:
    return lambda x: 0.8 if x <= knee else -4.0


SHAPES = {"queue": queue, "power": power, "cliff": cliff}


def plan_search(curve: Curve, narrow: Narrow, rng: np.random.Generator) -> tuple[int, float | None, float | None]:
    """(probes, found, lowest fail) of benchfleet's plan with `narrow`."""
    plan = SearchPlan(SearchSpec(low=LOW, high=HIGH, precision=PRECISION), narrow)
    while (step := plan.next_load()) is not None:
        load, repeat = step
        true = curve(load)
        margin = true + rng.normal(0, NOISE)
        if repeat:  # two runs pooled: the noise of their mean
            margin = true + rng.normal(0, NOISE / math.sqrt(2))
        plan.record(load, Reading(valid=True, margin=margin, uncertain=abs(true) < 2 * NOISE))
    out = plan.outcome()
    return plan.probes, out.found, out.lowest_fail


def old_search(curve: Curve, rng: np.random.Generator) -> tuple[int, float | None, float | None]:
    """benchfleet's search before: the ceiling, the floor, then linear midpoints, 8 probes, (high - low)/high < p."""
    low, high, rate, best, probes = LOW, HIGH, HIGH, None, 0
    fail: float | None = None
    for step in range(8):
        probes += 1
        passed = curve(rate) + rng.normal(0, NOISE) >= 0
        if passed:
            low, best = rate, max(best or 0.0, rate)
        else:
            high, fail = rate, rate if fail is None else min(fail, rate)
        if step == 0:
            if passed:
                break
            rate = LOW
            continue
        if step == 1 and not passed:
            break
        if (high - low) / high < PRECISION:
            break
        rate = (low + high) / 2
    return probes, best, fail


def explorer_probes(knee: float) -> int:
    """Evenly spaced loads from LOW to HIGH as dense as the resolution at the knee: what the sweep needs."""
    return math.ceil((HIGH - LOW) / (PRECISION * knee)) + 1


def synthetic() -> dict[str, float]:
    """The searches on synthetic curves of known knee; the figures for RESULT."""
    rng = np.random.default_rng(7)
    methods: dict[str, Callable[[Curve], tuple[int, float | None, float | None]]] = {
        "benchfleet": lambda c: plan_search(c, interpolate, rng),
        "bisect": lambda c: plan_search(c, bisect, rng),
        "old": lambda c: old_search(c, rng),
    }
    stats: dict[str, dict[str, list[float]]] = {m: {"probes": [], "error": [], "within": [], "resolved": []} for m in methods}
    explorer: list[int] = []
    print(f"{'method':<11} {'shape':<6} {'knee':>7} {'probes':>7} {'error %':>8} {'in resolution':>14}")
    for shape, make in SHAPES.items():
        for share in SHARES:
            knee = LOW + share * (HIGH - LOW) + 0.37
            explorer.append(explorer_probes(knee))
            for name, run in methods.items():
                rows = [run(make(knee)) for _ in range(TRIALS)]
                for probes, found, fail in rows:
                    err = abs((found or LOW) - knee) / knee
                    s = stats[name]
                    s["probes"].append(probes)
                    s["error"].append(err)
                    s["within"].append(float(err <= PRECISION))
                    s["resolved"].append(float(found is not None and fail is not None and (fail - found) / fail <= PRECISION))
                mean_probes = np.mean([r[0] for r in rows])
                mean_err = 100 * np.mean([abs((r[1] or LOW) - knee) / knee for r in rows])
                within = np.mean([abs((r[1] or LOW) - knee) / knee <= PRECISION for r in rows])
                print(f"{name:<11} {shape:<6} {knee:7.1f} {mean_probes:7.2f} {mean_err:8.2f} {100 * within:13.0f}%")
    summary = {
        f"{key}_{name}": float(np.mean(s[metric])) * scale
        for name, s in stats.items()
        for key, metric, scale in (("probes", "probes", 1), ("error_pct", "error", 100), ("within_pct", "within", 100))
    }
    summary |= {f"probes_max_{name}": float(np.max(s["probes"])) for name, s in stats.items()}
    summary["probes_vllm_explorer_mean"] = float(np.mean(explorer))
    summary["probes_ratio_benchfleet_vs_bisect"] = summary["probes_benchfleet"] / summary["probes_bisect"]
    summary["probes_ratio_benchfleet_vs_old"] = summary["probes_benchfleet"] / summary["probes_old"]
    summary["probes_ratio_benchfleet_vs_vllm_explorer"] = summary["probes_benchfleet"] / summary["probes_vllm_explorer_mean"]
    print(
        f"\nover {len(SHAPES) * len(SHARES)} curves x {TRIALS} noisy trials: benchfleet {summary['probes_benchfleet']:.2f} "
        f"probes (max {summary['probes_max_benchfleet']:.0f}), answer within {100 * PRECISION:g}% of the knee in "
        f"{summary['within_pct_benchfleet']:.0f}% of searches; bisection {summary['probes_bisect']:.2f}; the old search "
        f"{summary['probes_old']:.2f} ({summary['within_pct_old']:.0f}% within); vLLM 0.32's explorer needs "
        f"{summary['probes_vllm_explorer_mean']:.0f} evenly spaced loads for the same resolution"
    )
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--real", action="store_true", help="also against a real vLLM, beside vLLM's serve_sla (minutes)")
    parser.add_argument("--ttft-ms", type=float, default=250.0, help="the SLO: p99 TTFT at most this")
    parser.add_argument("--low", type=float, default=40.0, help="benchfleet's search range (req/s)")
    parser.add_argument("--high", type=float, default=320.0)
    parser.add_argument("--precision", type=float, default=0.02, help="benchfleet's resolution")
    parser.add_argument("--sla-prompts", type=int, default=300, help="requests in each of serve_sla's runs")
    parser.add_argument("--sla-runs", type=int, default=3, help="runs per serve_sla probe (its default)")
    parser.add_argument("--sla-as-is", action="store_true", help="vLLM's client unpinned at normal priority")
    args = parser.parse_args()
    summary = synthetic()
    if args.real:
        import search_real

        summary |= search_real.run(args)
    print("RESULT search " + " ".join(f"{k}={v:.4g}" for k, v in summary.items()))


if __name__ == "__main__":
    main()
