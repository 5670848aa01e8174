"""Does benchfleet's recomputation from an imported `vllm bench serve` run agree with benchfleet's own measurement of the
same server, within benchfleet's own run-to-run spread? (#48's cross-tool claim, measured here, not asserted in tests.)

One vLLM (the CPU build, the canonical tiny LLM, as bench/llm.py starts it) is driven in turn, interleaved, at the same
Poisson rate, count and lengths: benchfleet's generator (follower/loadgen, as a job drives a point), then
`vllm bench serve --save-result --save-detailed` from vLLM's own environment, then again each. Each vLLM result file
goes through the importer (common/formats/imports) and benchfleet's recomputation from its per-request records
(recompute.py: TTFT from each request's release by vLLM's arrival schedule, ITL every gap pooled). Printed per figure
(TTFT and ITL, p50 and p99): benchfleet's two runs, vLLM's own figure and benchfleet's recomputation from vLLM's
records; the spread is |run 1 - run 2| over their mean, the gap |mean recomputed - mean benchfleet| over benchfleet's
mean, and vLLM's own definitional shift (recomputed over vLLM's own, - 1).

Usage: .venv/bin/python bench/import_agreement.py [--rate 4] [--requests 120]
"""

from __future__ import annotations

import argparse
import io
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import llm_peers  # noqa: E402
from llm import SPEC, vllm_server  # noqa: E402

from benchfleet.generate.llmgen import generate  # noqa: E402
from common.formats import hfbundle  # noqa: E402
from common.formats.imports import read  # noqa: E402
from common.formats.imports.recompute import recompute  # noqa: E402
from common.spec.llm import LlmWorkload, TokenLengths  # noqa: E402
from follower.loadgen.llmprompts import PromptMaker, llm_bodies  # noqa: E402
from follower.loadgen.llmstats import llm_figures  # noqa: E402
from follower.loadgen.openloop import drive  # noqa: E402
from follower.loadgen.schedule import arrival_offsets_ns  # noqa: E402

FIGURES = ("ttft_p50", "ttft_p99", "itl_p50", "itl_p99")
INPUT, OUTPUT = 32, 16


def ours(backend, meta, maker: PromptMaker, rate: float, n: int, seed: int) -> dict[str, float]:  # type: ignore[no-untyped-def]
    """Benchfleet's figures of one run (TTFT from the intended send, ITL pooled), as a point computes them."""
    offsets = arrival_offsets_ns("poisson", rate, n / rate, seed=seed)[:n]
    workload = LlmWorkload(prompt_tokens=TokenLengths(mean=INPUT), output_tokens=TokenLengths(mean=OUTPUT))
    bodies, index, held, asked = llm_bodies(workload, meta.name, maker, len(offsets), seed=seed)
    rec = drive(backend.serves(meta), bodies, offsets, body_index=index, max_concurrency=4096, timeout_s=60, drain_s=30)
    judged = llm_figures(rec, n / rate, (held, asked), workload, None, maker)
    assert judged is not None and judged.figures.ttft_ms is not None and judged.figures.itl_ms is not None
    f = judged.figures
    return {"ttft_p50": f.ttft_ms.p50, "ttft_p99": f.ttft_ms.p99, "itl_p50": f.itl_ms.p50, "itl_p99": f.itl_ms.p99}


def theirs(
    backend, meta, model_dir: Path, rate: float, n: int, seed: int, tmp: Path
) -> tuple[dict[str, float], dict[str, float]]:  # type: ignore[no-untyped-def]
    """vLLM's own figures of one `vllm bench serve` run, and benchfleet's recomputed from its saved records."""
    out = tmp / f"vllm-{seed}.json"
    load = llm_peers.Load(backend.endpoint, meta.name, model_dir, rate, n, INPUT, OUTPUT, seed=seed)
    argv = [*llm_peers.vllm_bench_argv(load), "--save-result", "--save-detailed", "--result-filename", str(out)]
    argv += ["--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,90,99"]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        raise RuntimeError(f"vllm bench serve exited {proc.returncode}: {(proc.stdout + proc.stderr)[-1500:]}")
    run = read({out.name: out.read_bytes()}, "vllm")
    (level,) = run.levels
    mine = recompute(level, run.due_by)
    assert mine is not None and mine.ttft_p50_ms is not None and mine.itl_p50_ms is not None
    own = {f: (getattr(level, f.split("_")[0]) or {})[f.split("_")[1]] for f in FIGURES}
    again = {"ttft_p50": mine.ttft_p50_ms, "ttft_p99": mine.ttft_p99_ms, "itl_p50": mine.itl_p50_ms, "itl_p99": mine.itl_p99_ms}
    return own, {k: float(v) for k, v in again.items() if v is not None}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rate", type=float, default=4.0)
    parser.add_argument("--requests", type=int, default=120)
    args = parser.parse_args()
    data, _ = generate(SPEC)
    maker = PromptMaker(*hfbundle.tokenizer_files(io.BytesIO(data), 10**9))
    result: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp_s, vllm_server(data) as (backend, meta):
        tmp = Path(tmp_s)
        model_dir = hfbundle.extract(io.BytesIO(data), tmp / "model", 10**9)
        print(f"vLLM (CPU build), {args.requests} requests at {args.rate:g} req/s (Poisson), {INPUT} in / {OUTPUT} out tokens")
        a1 = ours(backend, meta, maker, args.rate, args.requests, seed=11)
        v1_own, v1 = theirs(backend, meta, model_dir, args.rate, args.requests, 12, tmp)
        a2 = ours(backend, meta, maker, args.rate, args.requests, seed=13)
        v2_own, v2 = theirs(backend, meta, model_dir, args.rate, args.requests, 14, tmp)
    head = f"{'figure':>9} {'bf run 1':>9} {'bf run 2':>9} {'vLLM own':>9} {'bf from vLLM records':>21}"
    print(f"{head} {'spread':>7} {'gap':>7} {'def shift':>9}")
    for fig in FIGURES:
        mean_ours = (a1[fig] + a2[fig]) / 2
        spread = abs(a1[fig] - a2[fig]) / mean_ours
        recomputed = (v1[fig] + v2[fig]) / 2
        gap = abs(recomputed - mean_ours) / mean_ours
        shift = float(np.mean([v1[fig] / v1_own[fig] - 1, v2[fig] / v2_own[fig] - 1]))
        own = (v1_own[fig] + v2_own[fig]) / 2
        print(
            f"{fig:>9} {a1[fig]:9.2f} {a2[fig]:9.2f} {own:9.2f} {v1[fig]:10.2f} / {v2[fig]:8.2f} {100 * spread:6.1f}% "
            f"{100 * gap:6.1f}% {100 * shift:+8.1f}%"
        )
        result |= {f"{fig}_spread_pct": round(100 * spread, 2), f"{fig}_gap_pct": round(100 * gap, 2)}
        result |= {
            f"{fig}_def_shift_pct": round(100 * shift, 2),
            f"{fig}_gap_over_spread": round(gap / spread, 2) if spread else float("inf"),
        }
    print("RESULT import_agreement " + " ".join(f"{k}={v:g}" for k, v in result.items()))


if __name__ == "__main__":
    main()
