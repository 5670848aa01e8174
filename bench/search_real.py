"""bench/search.py --real: one SLO question asked of a real vLLM twice, by benchfleet's search and by vLLM's
`vllm bench sweep serve_sla`, on the same running server (vLLM 0.32's CPU build serving the canonical LLM).

The question: the highest Poisson request rate at which p99 TTFT stays at most --ttft-ms (48-token prompts, 16 output
tokens, EOS ignored).
- benchfleet: an endpoint job on a local leader and follower (the product's own path), a rate search over
  [--low, --high] at --precision whose criterion is goodput attainment >= 0.99 of TTFT <= the limit (for one limit the
  same as p99 TTFT <= it); each probe a full measured point (>= 459 requests, a repeat where its interval straddles the
  limit).
- serve_sla (vLLM 0.16, the last vLLM with it, in its own environment: bench/install_peers.sh): SLA `p99_ttft_ms <=
  limit` over request_rate; its own range is fixed at [1, 8192] and its resolution at 1 req/s (it probes 8192, then
  1, then the root of a PCHIP interpolant of the margin). Each probe is --sla-runs (its default 3) `vllm bench serve`
  runs of --sla-prompts requests each from vLLM 0.32's environment, judged on the mean of their p99s; its "server"
  command only holds the running server's address (the server is started here once, for both). vLLM's client runs as
  benchfleet's generator does, on its own core at real-time priority (--sla-as-is: unpinned at normal priority; on 2
  cores it then shares the CPU with the server, and at 100 req/s read p99 TTFT 1.3-7.0 s where pinned it read 34-45 ms).

Printed per tool: every probe (rate, p99 TTFT, verdict), the answer and its bracket, the probes' count, the minutes the
probes held the server, and the whole run's wall time. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from llm import SPEC, vllm_server  # noqa: E402
from llm_peers import PEERS_DIR, Load, vllm_bench_argv  # noqa: E402

from benchfleet.generate.llmgen import generate  # noqa: E402
from benchfleet.stack import LocalStack  # noqa: E402
from common.formats import hfbundle  # noqa: E402
from common.procs import free_port  # noqa: E402
from common.spec.load import SearchSpec  # noqa: E402
from common.wire.jobs import TERMINAL_STATES, JobState  # noqa: E402
from common.wire.search import SearchAnswer  # noqa: E402
from follower.backends.vllm import VllmBackend  # noqa: E402

PROMPT_TOKENS, OUTPUT_TOKENS = 48, 16
DURATION_S, WARMUP_S = 6.0, 1.0
SLA_PYTHON = PEERS_DIR / "vllm-sla" / "bin" / "python"


def _job_yaml(args: argparse.Namespace, endpoint: str, model: str) -> str:
    search = f"{{low: {args.low}, high: {args.high}, precision: {args.precision}, max_steps: 16}}"
    return f"""\
name: search-beside-serve-sla
model: {{ref: "{model}:1"}}
load: {{pattern: poisson, duration: {DURATION_S:g}s, warmup: {WARMUP_S:g}s, search: {search}}}
llm: {{prompt_tokens: {PROMPT_TOKENS}, output_tokens: {OUTPUT_TOKENS}}}
slo: {{ttft_ms: {args.ttft_ms}, attainment: 0.99}}
target: {{url: "{endpoint}", protocol: openai}}
"""


def benchfleet_search(args: argparse.Namespace, data: bytes, endpoint: str, model: str) -> tuple[SearchAnswer, float]:
    """benchfleet's answer, and the wall seconds from the job's submission to its end."""
    with tempfile.TemporaryDirectory() as tmp:
        stack = LocalStack(Path(tmp), env={"BENCHFLEET_FOLLOWER_METRICS_PORT": str(free_port())})
        with stack:
            stack.start_mongo()
            stack.start_redis()
            stack.start_leader()
            stack.start_follower("local")
            with stack.client() as client:
                client.upload_model(data, name=model, version="1", format="hf")
                started = time.monotonic()
                job = client.submit_yaml(_job_yaml(args, endpoint, model))
                while job.state not in TERMINAL_STATES:
                    if time.monotonic() - started > 1800:
                        raise TimeoutError(f"benchfleet's search did not end in 30 minutes (state {job.state})")
                    time.sleep(1)
                    job = client.job(job.id)
                wall = time.monotonic() - started
                results = client.results(job.id)
            if job.state != JobState.succeeded:
                raise RuntimeError(f"benchfleet's search job {job.state}: {job.error}")
            (point,) = results.points
            if point.search is None:
                raise RuntimeError("benchfleet's search point carries no answer")
            return point.search, wall


def client_prefix(args: argparse.Namespace) -> list[str]:
    """How vLLM's client runs: as benchfleet's generator does (its own core, real-time priority where this may set it),
    unless --sla-as-is (unpinned, normal priority: on 2 cores it then shares the CPU with the server on equal terms)."""
    if args.sla_as_is:
        return []
    core = str(min(os.sched_getaffinity(0)))
    return ["taskset", "-c", core, *(["chrt", "-f", "50"] if os.geteuid() == 0 else ["nice", "-n", "-10"])]


def serve_sla(args: argparse.Namespace, endpoint: str, model: str, tokenizer: Path) -> tuple[list[dict[str, float]], float]:
    """serve_sla's probes (rate, p99 TTFT, duration s, met) in the order it ran them, and its wall seconds."""
    host, port = endpoint.removeprefix("http://").split(":")
    load = Load(endpoint, model, tokenizer, rate=0, n=args.sla_prompts, input_tokens=PROMPT_TOKENS, output_tokens=OUTPUT_TOKENS)
    with tempfile.TemporaryDirectory() as tmp:
        sla = Path(tmp) / "sla.json"
        sla.write_text(json.dumps([{"p99_ttft_ms": f"<={args.ttft_ms}"}]))
        # The server is already running: serve_sla's "server" only holds its address (it reads --host/--port from the
        # command and waits for /health there); nothing to reset after each run (no prefix cache hits: random prompts).
        hold = ["bash", "-c", "sleep infinity", "vllm-already-running", "--host", host, "--port", port]
        argv = [
            str(SLA_PYTHON),
            "-m",
            "vllm.benchmarks.sweep.serve_sla",
            "--serve-cmd",
            shlex.join(hold),
            "--bench-cmd",
            shlex.join(client_prefix(args) + vllm_bench_argv(load, with_rate=False)),
            "--after-bench-cmd",
            "true",
            "--sla-params",
            str(sla),
            "--sla-variable",
            "request_rate",
            "--num-runs",
            str(args.sla_runs),
            "-o",
            str(Path(tmp) / "out"),
        ]
        started = time.monotonic()
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=3600, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        wall = time.monotonic() - started
        if proc.returncode != 0:
            raise RuntimeError(f"serve_sla exited {proc.returncode}: {(proc.stdout + proc.stderr)[-1500:]}")
        probes = []  # one per rate it tried, in its order: the mean of its runs' p99s is what it judged
        for rate_dir in sorted((Path(tmp) / "out").rglob("request_rate=*"), key=lambda p: p.stat().st_mtime):
            runs = [json.loads(r.read_text()) for r in sorted(rate_dir.glob("run=*.json"))]
            if not runs:
                continue
            p99 = sum(float(d["p99_ttft_ms"]) for d in runs) / len(runs)
            probes.append(
                {
                    "rate": float(rate_dir.name.split("=", 1)[1]),
                    "runs": len(runs),
                    "p99_ttft_ms": p99,
                    "duration_s": sum(float(d["duration"]) for d in runs),
                    "met": p99 <= args.ttft_ms,
                }
            )
        return probes, wall


def run(args: argparse.Namespace) -> dict[str, float]:
    """Both searches on one vLLM; the figures for RESULT (prefixed real_)."""
    print(f"\nreal: the highest Poisson rate with p99 TTFT <= {args.ttft_ms:g} ms on vLLM 0.32 (CPU) serving the canonical LLM")
    ok, why = VllmBackend.available()
    if not ok:
        print(f"  not run: {why}")
        return {}
    if not SLA_PYTHON.exists():
        print(f"  serve_sla: not installed ({SLA_PYTHON.parent.parent} missing; bench/install_peers.sh makes it)")
    data, _ = generate(SPEC)
    out: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp, vllm_server(data) as (backend, meta):
        tokenizer = hfbundle.extract(io.BytesIO(data), Path(tmp) / "model", 10**9)
        # Warm the server first (its first batches of each size are slow on CPU): one burst neither search counts.
        warm = Load(backend.endpoint, meta.name, tokenizer, 400, 600, input_tokens=PROMPT_TOKENS, output_tokens=OUTPUT_TOKENS)
        subprocess.run(vllm_bench_argv(warm), capture_output=True, timeout=600, check=True)

        answer, wall = benchfleet_search(args, data, backend.endpoint, meta.name)
        print(f"  benchfleet: {answer.summary()}")
        for p in answer.probes:
            flag = ("pass" if p.passed else "fail") + (" uncertain" if p.uncertain else "") + (" (repeat)" if p.repeat else "")
            flag += "" if p.valid else f" invalid: {'; '.join(p.reasons)}"
            print(f"    {p.load:8.2f} req/s  attainment {p.attainment or 0:.4f}  {flag}")
        # What each probe held the server: its measured part (the job's 6 s, longer at low rates) and its 1 s warm-up.
        spec = SearchSpec(low=args.low, high=args.high, precision=args.precision, max_steps=16)
        held = sum(spec.probe_duration(p.load, DURATION_S) + WARMUP_S for p in answer.probes)
        out |= {
            "real_probes_benchfleet": len(answer.probes),
            "real_found_benchfleet": answer.found or 0.0,
            "real_fail_benchfleet": answer.lowest_fail or 0.0,
            "real_server_min_benchfleet": held / 60,
            "real_wall_min_benchfleet": wall / 60,
        }
        print(f"    {len(answer.probes)} probes, {held / 60:.1f} server-minutes, {wall / 60:.1f} minutes from submission")

        if SLA_PYTHON.exists():
            probes, sla_wall = serve_sla(args, backend.endpoint, meta.name, tokenizer)
            passing = [q["rate"] for q in probes if q["met"]]
            failing = [q["rate"] for q in probes if not q["met"]]
            found = max(passing, default=1.0)  # serve_sla's answer: its highest passing rate (its minimum 1 if none)
            fail = min(failing, default=8192.0)
            held_sla = sum(q["duration_s"] for q in probes)
            how = "unpinned, normal priority" if args.sla_as_is else " ".join(client_prefix(args))
            print(f"  serve_sla (vLLM's client: {how}): {found:g} req/s (fails at {fail:g}); {len(probes)} probes")
            for q in probes:
                verdict = "pass" if q["met"] else "fail"
                runs = f"mean of {q['runs']:.0f} runs"
                print(f"    {q['rate']:8.0f} req/s  p99 TTFT {q['p99_ttft_ms']:8.1f} ms ({runs})  {verdict}")
            print(f"    {len(probes)} probes, {held_sla / 60:.1f} server-minutes, {sla_wall / 60:.1f} minutes in all")
            out |= {
                "real_probes_serve_sla": len(probes),
                "real_found_serve_sla": found,
                "real_fail_serve_sla": fail,
                "real_server_min_serve_sla": held_sla / 60,
                "real_wall_min_serve_sla": sla_wall / 60,
            }
            if answer.found:
                gap = abs(answer.found - found) / max(answer.found, found)
                out["real_answers_apart_pct"] = 100 * gap
                print(f"  the answers lie {100 * gap:.1f}% apart; benchfleet's resolution {100 * args.precision:g}%")
    return out
