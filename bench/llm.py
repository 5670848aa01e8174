"""LLM serving: benchfleet's streaming client against a fake endpoint of fixed timing, and against a real vLLM.

Sections (figures printed, nothing asserted):
  1. ceiling: a fake OpenAI-compatible server (tests/integration/follower/fake_llm_server.py: each request gets
     --tokens tokens, --gap-ms apart, after 1 ms) on its own core; benchfleet's open loop (the follower's generator
     and streaming transport) on the other, at a Poisson ladder of request rates. Per rate: the token events/s
     received, the generator's CPU µs per token event over the run, send-lag p99, and whether every stream came
     through whole. At the top valid rate: benchfleet's marginal CPU per event (runs of D and 2D seconds), and vLLM's
     own benchmark client (`vllm.benchmarks.serve`, in vLLM's environment, never benchfleet's) at the same rate
     against the same server, its CPU read from /proc over its sending phase only, beside benchfleet's over its run.
     On a 2-core VM the fake server (Python, aiohttp) runs out of core before either client does: the figures are
     the clients' cost per event; the highest event rate reached is the server's ceiling, not the clients'.
  2. stall: a real vLLM (the canonical LLM, CPU build) at a steady rate; SIGSTOP for --stall-s in the middle of
     the run, then SIGCONT. TTFT p50/p99 from the intended time (benchfleet's) beside the same from the send (what
     the peer tools report). Our open loop sends on time through the pause, so here both include it; a client that
     waits for slots (or sends closed-loop) would start its clock late and report less. The peers' own runs of the
     same stall are not in this bench yet.

Usage: .venv/bin/python bench/llm.py [--sections 1 2] [--tokens 64] [--gap-ms 2] [--rates 10 40 100 200]
Ends with one line: RESULT llm key=value ...
"""

from __future__ import annotations

import argparse
import io
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from common import hfbundle  # noqa: E402
from common.llmgen import LlamaSpec, generate  # noqa: E402
from common.llmspec import LlmWorkload, TokenLengths  # noqa: E402
from common.models import ModelMeta  # noqa: E402
from common.procs import SupervisedProcess, free_port, http_ready  # noqa: E402
from follower.backends.vllm import VllmBackend  # noqa: E402
from follower.loadgen.llmprompts import PromptMaker, llm_bodies  # noqa: E402
from follower.loadgen.openloop import drive  # noqa: E402
from follower.loadgen.schedule import arrival_offsets_ns  # noqa: E402

FAKE = ROOT / "tests" / "integration" / "follower" / "fake_llm_server.py"
SPEC = LlamaSpec(layers=2, hidden=128, heads=4, kv_heads=4, intermediate=256, vocab=2048, context=512, seed=5)


def _pct(values: np.ndarray, q: float) -> float:
    return float(np.percentile(values, q)) if len(values) else float("nan")


def run_ours(url: str, maker: PromptMaker, rate: float, duration_s: float, tokens: int, core: int | None) -> dict[str, float]:
    """One open-loop run of benchfleet's generator; its figures."""
    offsets = arrival_offsets_ns("poisson", rate, duration_s, seed=int(rate))
    workload = LlmWorkload(prompt_tokens=TokenLengths(mean=16), output_tokens=TokenLengths(mean=tokens))
    bodies, index, _, _ = llm_bodies(workload, "fake", maker, len(offsets), seed=1)
    if core is not None:
        os.sched_setaffinity(0, {core})
    rec = drive(url, bodies, offsets, body_index=index, max_concurrency=4096, timeout_s=60, drain_s=30)
    ok = rec.ok
    events = int(sum(len(t) for t in (rec.llm.token_times if rec.llm else []) if t is not None))
    whole = bool(rec.llm is not None and (rec.llm.completion_tokens[ok] == tokens).all())
    lag = (rec.sent_ns[rec.sent] - rec.intended_ns[rec.sent]) / 1e6
    span_s = (rec.done_ns[ok].max() - rec.start_ns) / 1e9 if ok.any() else duration_s
    return {"events_per_s": events / span_s, "cpu_us_per_event": 1e6 * rec.cpu_s / max(events, 1),
            "send_lag_p99_ms": _pct(lag, 99), "ok": float(ok.sum()), "requests": float(len(rec)), "whole": float(whole),
            "cpu_share": rec.cpu_share, "cpu_s": rec.cpu_s, "events": float(events)}  # fmt: skip


def run_vllm_client(python: Path, base_url: str, tokenizer_dir: Path, rate: float, n: int, tokens: int,
                    core: int | None) -> tuple[float, dict[str, float]]:  # fmt: skip
    """vLLM's benchmark client in its own environment: (CPU seconds of its sending phase, its reported figures).

    Its CPU time is read from /proc (psutil) when it announces its traffic and again when it prints its results:
    start-up, imports and its tokenizer's loading stay out of the figure.
    """
    import psutil

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.json"
        args = ["--backend", "openai", "--base-url", base_url, "--endpoint", "/v1/completions", "--model", "fake",
                "--tokenizer", str(tokenizer_dir), "--dataset-name", "random", "--random-input-len", "16",
                "--random-output-len", str(tokens), "--num-prompts", str(n), "--request-rate", str(rate), "--ignore-eos",
                "--seed", "1", "--save-result", "--result-filename", str(out)]  # fmt: skip
        code = ("import argparse, sys\nfrom vllm.benchmarks.serve import add_cli_args, main\n"
                "p = argparse.ArgumentParser(); add_cli_args(p); main(p.parse_args(sys.argv[1:]))\n")  # fmt: skip
        argv = [str(python), "-u", "-c", code, *args]
        if core is not None:
            argv = ["taskset", "-c", str(core), *argv]
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        watched = psutil.Process(proc.pid)
        marks: list[float] = []
        tail: list[str] = []
        assert proc.stdout is not None
        for line in proc.stdout:
            tail = [*tail[-20:], line]
            if ("Traffic request rate" in line and not marks) or ("Serving Benchmark Result" in line and len(marks) == 1):
                times = watched.cpu_times()
                marks.append(times.user + times.system)
        proc.wait(timeout=900)
        if proc.returncode != 0 or not out.exists() or len(marks) != 2:
            print(f"  vLLM's client failed ({proc.returncode}): {''.join(tail)[-600:]}")
            return float("nan"), {}
        return marks[1] - marks[0], json.loads(out.read_text())


def ceiling(args: argparse.Namespace, model_dir: Path, maker: PromptMaker, results: dict[str, float]) -> None:
    cores = sorted(os.sched_getaffinity(0))
    gen_core, srv_core = cores[0], cores[-1] if len(cores) > 1 else None
    port = free_port()
    argv = [sys.executable, str(FAKE), "--port", str(port), "--ttft-ms", "1", "--gap-ms", str(args.gap_ms)]
    if srv_core is not None:
        argv = ["taskset", "-c", str(srv_core), *argv]
    with tempfile.TemporaryDirectory() as tmp, SupervisedProcess(argv, name="fake LLM", log_path=Path(tmp) / "fake.log") as srv:
        srv.wait_ready(http_ready(f"http://127.0.0.1:{port}/v1/models"), timeout_s=30)
        url = f"http://127.0.0.1:{port}/v1/completions"
        print(f"1. ceiling: fake server, {args.tokens} tokens per answer {args.gap_ms:g} ms apart; benchfleet on core "
              f"{gen_core}, the server on core {srv_core}")
        print(f"{'rate':>7} {'events/s':>9} {'cpu us/ev':>9} {'lag p99':>8} {'ok':>6} {'whole':>5}")
        best = 0.0
        top = 0.0
        for rate in args.rates:
            r = run_ours(url, maker, rate, args.duration, args.tokens, gen_core)
            valid = r["send_lag_p99_ms"] < 1.0 and r["ok"] == r["requests"] and r["whole"] == 1.0
            print(f"{rate:7.0f} {r['events_per_s']:9.0f} {r['cpu_us_per_event']:9.2f} {r['send_lag_p99_ms']:8.3f} "
                  f"{r['ok']:6.0f} {int(r['whole']):>5}{'' if valid else '  (not valid)'}")  # fmt: skip
            if valid and r["events_per_s"] > best:
                best, top = r["events_per_s"], rate
        results["ours_max_events_per_s"] = best
        if top == 0:
            return
        # CPU per token event as the marginal cost at the top valid rate: runs of D and 2D seconds, the difference of
        # their CPU over the difference of their events. Start-up, and what a client burns per second whatever it
        # sends, cancel out; the same for both clients.
        short = run_ours(url, maker, top, args.duration, args.tokens, gen_core)
        long = run_ours(url, maker, top, 2 * args.duration, args.tokens, gen_core)
        ours_us = 1e6 * (long["cpu_s"] - short["cpu_s"]) / max(long["events"] - short["events"], 1)
        results["ours_cpu_us_per_event"] = ours_us
        results["ours_events_per_cpu_s"] = 1e6 / ours_us if ours_us > 0 else float("nan")
        print(f"  benchfleet at {top:g} req/s: {ours_us:.2f} CPU us per token event (marginal: {args.duration:g} s "
              f"and {2 * args.duration:g} s runs) -> {results['ours_events_per_cpu_s']:.0f} token events per CPU second")
        python = Path(os.environ.get("BENCHFLEET_FOLLOWER_VLLM_PYTHON", ROOT / ".benchfleet" / "vllm" / "bin" / "python"))
        if not python.exists():
            print("  vLLM's client: not run (no vLLM environment)")
            return
        n = int(top * 2 * args.duration)
        cpu, figures = run_vllm_client(python, f"http://127.0.0.1:{port}", model_dir, top, n, args.tokens, gen_core)
        if figures:
            peer_us = 1e6 * cpu / (n * args.tokens)
            ttft, itl = figures.get("p99_ttft_ms", float("nan")), figures.get("p99_itl_ms", float("nan"))
            print(f"  vLLM's client at {top:g} req/s, {n} requests: {cpu:.2f} CPU s while sending -> {peer_us:.2f} CPU "
                  f"us per token event; its TTFT p99 {ttft:.2f} ms, ITL p99 {itl:.2f} ms")  # fmt: skip
            ours_whole = 1e6 * long["cpu_s"] / max(long["events"], 1)
            print(f"  benchfleet's whole {2 * args.duration:g} s run at the same rate: {ours_whole:.2f} CPU us per token "
                  "event (the like-for-like figure: both clients' CPU over their sending phase)")
            results["ours_cpu_us_per_event_run"] = ours_whole
            results["vllm_client_cpu_us_per_event"] = peer_us
            results["ours_vs_vllm_client_per_core"] = peer_us / ours_whole if ours_whole > 0 else float("nan")


def stall(args: argparse.Namespace, data: bytes, maker: PromptMaker, results: dict[str, float]) -> None:
    ok, why = VllmBackend.available()
    if not ok:
        print(f"2. stall: not run ({why})")
        return
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "m.zip"
        path.write_bytes(data)
        meta = ModelMeta(name="tiny", version="1", format="hf", inputs=[], outputs=[], sha256="-", size_bytes=len(data),
                         created_at=datetime.now(UTC), llm=hfbundle.describe(io.BytesIO(data), 10**9))  # fmt: skip
        backend = VllmBackend()
        backend.start(path, meta, Path(tmp) / "work")
        try:
            backend.wait_ready(600)
            pid = backend.process.pid if backend.process is not None else None
            rate, duration = args.stall_rate, args.stall_duration
            offsets = arrival_offsets_ns("poisson", rate, duration, seed=3)
            workload = LlmWorkload(prompt_tokens=TokenLengths(mean=32), output_tokens=TokenLengths(mean=16))
            bodies, index, _, _ = llm_bodies(workload, "tiny", maker, len(offsets), seed=2)

            def pause() -> None:
                time.sleep(duration / 2)
                if pid is not None:
                    os.killpg(pid, signal.SIGSTOP)
                    time.sleep(args.stall_s)
                    os.killpg(pid, signal.SIGCONT)

            pauser = threading.Thread(target=pause, daemon=True)
            pauser.start()
            rec = drive(backend.infer_url(meta), bodies, offsets, body_index=index, max_concurrency=4096, timeout_s=60,
                        drain_s=30)  # fmt: skip
            pauser.join()
            cols = rec.llm
            assert cols is not None
            first = cols.first_token_ns()
            has = rec.ok & (first >= 0)
            intended = (first[has] - rec.intended_ns[has]) / 1e6
            sent = (first[has] - rec.sent_ns[has]) / 1e6
            print(f"2. stall: vLLM paused {args.stall_s:g} s mid-run at {rate:g} req/s: TTFT p99 from the intended time "
                  f"{_pct(intended, 99):.1f} ms, from the send {_pct(sent, 99):.1f} ms; p50 {_pct(intended, 50):.1f} / "
                  f"{_pct(sent, 50):.1f} ms; {int(has.sum())}/{len(rec)} answered")  # fmt: skip
            results |= {"stall_ttft_p99_intended_ms": _pct(intended, 99), "stall_ttft_p99_sent_ms": _pct(sent, 99),
                        "stall_ttft_p50_intended_ms": _pct(intended, 50)}  # fmt: skip
        finally:
            backend.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sections", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--gap-ms", type=float, default=2.0)
    parser.add_argument("--rates", type=float, nargs="+", default=[10, 40, 100, 200])
    parser.add_argument("--duration", type=float, default=5.0)
    parser.add_argument("--stall-rate", type=float, default=10.0)
    parser.add_argument("--stall-duration", type=float, default=10.0)
    parser.add_argument("--stall-s", type=float, default=1.0)
    args = parser.parse_args()
    data, _ = generate(SPEC)
    maker = PromptMaker(*hfbundle.tokenizer_files(io.BytesIO(data), 10**9))
    results: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = hfbundle.extract(io.BytesIO(data), Path(tmp) / "model", 10**9)
        if 1 in args.sections:
            ceiling(args, model_dir, maker, results)
        if 2 in args.sections:
            stall(args, data, maker, results)
    print("RESULT llm " + " ".join(f"{k}={v:.4g}" for k, v in results.items()))


if __name__ == "__main__":
    main()
