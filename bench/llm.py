"""LLM serving: benchfleet's streaming client beside the peer tools, against a fake endpoint of fixed timing and against
a real vLLM.

Sections (figures printed, nothing asserted; the peers run from their own environments, bench/llm_peers.py):
  1. ceiling: a fast fake OpenAI-compatible server (bench/fake_llm_fast.py: --tokens tokens per answer, --gap-ms apart,
     after 1 ms) on its own core; benchfleet's open loop (the follower's generator and streaming transport) on the
     other, at a Poisson ladder of request rates, three runs per rate. Per rate: the token events/s received, the
     generator's CPU us per token event, send-lag p99 (the median run's; a rate is valid when it is < 1 ms and every
     stream came through whole; CPU wake-up latency held at 0, as the follower holds it). At the top valid rate, at
     most --peer-rate: benchfleet's marginal CPU per event (runs of D and 2D seconds: start-up cancels out), and each
     installed peer (`vllm bench serve`, AIPerf, GuideLLM) at the same rate pinned to the same core, its CPU per event
     by the same method (its whole process tree).
  2. stall: a real vLLM (the canonical LLM, CPU build) at a steady rate; SIGSTOP for --stall-s in the middle of the
     run (timed from the server's first answer, so each client gets the same stall), then SIGCONT. Benchfleet's TTFT
     p50/p99 from the intended time (and from the send), and each peer's as it reports it, under the same stall.
  3. agreement: every client against that vLLM at the same Poisson rate, count and lengths, one after the other;
     TTFT and ITL p50/p99 side by side, each beside vLLM's own histograms over that client's run (the quantile's
     estimate within its bucket: the edges bound the true value). CPU wake-up latency is held at 0 here and in 2 too.

  4. long context (bench/llm_long.py): a 100,000-token prompt and a 4,000-token streamed answer through benchfleet's
     streaming client against the fast fake server, beside a 16-token prompt's (the reference, same run): the tokens/s
     the client received against the rate the server wrote them at (its own clock and count), the client's CPU.

  5. sessions (bench/llm_sessions.py): agentic sessions against that vLLM, their context growing turn by turn: TTFT
     p50/p99 per turn index against turn 0's, and vLLM's prefix-cache hit share.

Usage: .venv/bin/python bench/llm.py [--sections 1 2 3 4 5] [--tokens 64] [--gap-ms 2] [--rates 100 700 1300] [--skip-peers]
Peers: bench/install_peers.sh (AIPerf, GuideLLM; vLLM's comes with scripts/install_vllm.sh).
Ends with one line: RESULT llm key=value ...
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import llm_peers  # noqa: E402
from llm_floor import fake_load, run_floor  # noqa: E402
from llm_long import long_context  # noqa: E402
from llm_sessions import sessions  # noqa: E402

from benchfleet.generate.llmgen import LlamaSpec, generate  # noqa: E402
from common.formats import hfbundle  # noqa: E402
from common.procs import SupervisedProcess, free_port, http_ready  # noqa: E402
from common.spec.llm import LlmWorkload, TokenLengths  # noqa: E402
from common.wire.models import ModelMeta  # noqa: E402
from follower.backends.stats import llm_server_delta  # noqa: E402
from follower.backends.vllm import VllmBackend  # noqa: E402
from follower.host.wakeup import hold_wakeup_latency  # noqa: E402
from follower.loadgen.llmprompts import PromptMaker, llm_bodies  # noqa: E402
from follower.loadgen.llmstats import llm_figures  # noqa: E402
from follower.loadgen.openloop import drive  # noqa: E402
from follower.loadgen.schedule import arrival_offsets_ns  # noqa: E402
from follower.protocols import Endpoint  # noqa: E402

FAKE = ROOT / "bench" / "fake_llm_fast.py"
SPEC = LlamaSpec(layers=2, hidden=128, heads=4, kv_heads=4, intermediate=256, vocab=2048, context=512, seed=5)


def _pct(values: np.ndarray, q: float) -> float:
    return float(np.percentile(values, q)) if len(values) else float("nan")


def run_ours(url: str, maker: PromptMaker, rate: float, duration_s: float, tokens: int, core: int | None) -> dict[str, float]:
    """One open-loop run of benchfleet's generator; its figures."""
    offsets, bodies, index = fake_load(maker, rate, duration_s, tokens, core)
    rec = drive(Endpoint("openai", url), bodies, offsets, body_index=index, max_concurrency=4096, timeout_s=60, drain_s=30)
    ok = rec.ok
    events = int(sum(len(t) for t in (rec.llm.token_times if rec.llm else []) if t is not None))
    whole = bool(rec.llm is not None and (rec.llm.completion_tokens[ok] == tokens).all())
    lag = (rec.sent_ns[rec.sent] - rec.intended_ns[rec.sent]) / 1e6
    span_s = (rec.done_ns[ok].max() - rec.start_ns) / 1e9 if ok.any() else duration_s
    return {
        "events_per_s": events / span_s,
        "cpu_us_per_event": 1e6 * rec.cpu_s / max(events, 1),
        "send_lag_p99_ms": _pct(lag, 99),
        "ok": float(ok.sum()),
        "requests": float(len(rec)),
        "whole": float(whole),
        "cpu_share": rec.cpu_share,
        "cpu_s": rec.cpu_s,
        "events": float(events),
    }


def ceiling(args: argparse.Namespace, model_dir: Path, maker: PromptMaker, results: dict[str, float]) -> None:
    cores = sorted(os.sched_getaffinity(0))
    gen_core, srv_core = cores[0], cores[-1] if len(cores) > 1 else None
    port = free_port()
    argv = [sys.executable, str(FAKE), "--port", str(port), "--ttft-ms", "1", "--gap-ms", str(args.gap_ms)]
    if srv_core is not None:
        argv = ["taskset", "-c", str(srv_core), *argv]
    # As the follower does while it measures (follower/host/wakeup.py): idle CPUs wake at once, not after a deep sleep.
    with (
        tempfile.TemporaryDirectory() as tmp,
        SupervisedProcess(argv, name="fake LLM", log_path=Path(tmp) / "fake.log") as srv,
        hold_wakeup_latency(0) as wakeup,
    ):
        srv.wait_ready(http_ready(f"http://127.0.0.1:{port}/v1/models"), timeout_s=30)
        url = f"http://127.0.0.1:{port}/v1/completions"
        print(
            f"1. ceiling: fake server, {args.tokens} tokens per answer {args.gap_ms:g} ms apart; benchfleet on core "
            f"{gen_core}, the server on core {srv_core}; CPU wake-up latency {wakeup.describe()}"
        )
        print(f"{'rate':>7} {'events/s':>9} {'cpu us/ev':>9} {'lag p99':>8} {'ok':>6} {'whole':>5}")
        best = 0.0
        top = 0.0
        whole_top = 0.0
        for rate in args.rates:
            # Three runs per rate, the median's send lag judged: a 2-vCPU VM is sometimes descheduled for milliseconds,
            # which one run's p99 cannot tell from the generator's own lateness.
            runs = sorted(
                (run_ours(url, maker, rate, args.duration, args.tokens, gen_core) for _ in range(3)),
                key=lambda x: x["send_lag_p99_ms"],
            )
            r = runs[1]
            whole = all(x["ok"] == x["requests"] and x["whole"] == 1.0 for x in runs)
            valid = r["send_lag_p99_ms"] < 1.0 and whole
            lags = "/".join(f"{x['send_lag_p99_ms']:.2f}" for x in runs)
            print(
                f"{rate:7.0f} {r['events_per_s']:9.0f} {r['cpu_us_per_event']:9.2f} {r['send_lag_p99_ms']:8.3f} "
                f"{r['ok']:6.0f} {int(whole):>5}  lag p99 of 3 runs {lags} ms{'' if valid else '  (not valid)'}"
            )
            if valid and r["events_per_s"] > best:
                best, top = r["events_per_s"], rate
            if whole:
                whole_top = rate
        results["ours_max_events_per_s"] = best
        results["ours_max_rate"] = top
        if top == 0:
            # No rate met the send-lag bound: the clients' CPU per event is still compared at the top whole rate.
            top = whole_top
            print(f"  no rate had send-lag p99 < 1 ms; CPU per event compared at {top:g} req/s")
        if top == 0:
            return
        # The clients are compared at one rate each of them can at least run (the peers' clients saturate a core far
        # below ours): the top valid rate, at most --peer-rate.
        top = min(top, args.peer_rate)
        # CPU per token event as the marginal cost at that rate: runs of D and 2D seconds, the difference of their CPU
        # over the difference of their events. Start-up, and what a client burns per second whatever it sends, cancel
        # out; the same for every client.
        short = run_ours(url, maker, top, args.duration, args.tokens, gen_core)
        long = run_ours(url, maker, top, 2 * args.duration, args.tokens, gen_core)
        ours_us = 1e6 * (long["cpu_s"] - short["cpu_s"]) / max(long["events"] - short["events"], 1)
        results["ours_cpu_us_per_event"] = ours_us
        results["ours_events_per_cpu_s"] = 1e6 / ours_us if ours_us > 0 else float("nan")
        results["ours_send_lag_p99_ms_at_top"] = long["send_lag_p99_ms"]
        print(
            f"  benchfleet at {top:g} req/s: {ours_us:.2f} CPU us per token event (marginal: {args.duration:g} s "
            f"and {2 * args.duration:g} s runs) -> {results['ours_events_per_cpu_s']:.0f} token events per CPU second; "
            f"send-lag p99 {long['send_lag_p99_ms']:.3f} ms"
        )
        # The reference, same method: the generator reading and stamping each token's read and nothing else
        # (bench/llm_floor.py): the host's own cost per read, which no client that times every token avoids.
        short_f, long_f = (run_floor(url, maker, top, k * args.duration, args.tokens, gen_core) for k in (1, 2))
        floor_us = 1e6 * (long_f["cpu_s"] - short_f["cpu_s"]) / max(long_f["events"] - short_f["events"], 1)
        results["floor_cpu_us_per_event"] = floor_us
        results["ours_vs_floor"] = ours_us / floor_us if floor_us > 0 else float("nan")
        print(
            f"  the bare reader at {top:g} req/s: {floor_us:.2f} CPU us per token event (it only reads and stamps); "
            f"benchfleet costs {results['ours_vs_floor']:.2f}x that"
        )
        if not args.skip_peers:
            peers_at(
                f"http://127.0.0.1:{port}",
                model_dir,
                top,
                n=int(top * args.duration),
                tokens=args.tokens,
                core=gen_core,
                ours_us=ours_us,
                results=results,
            )


def peers_at(
    base_url: str, model_dir: Path, rate: float, n: int, tokens: int, core: int | None, ours_us: float, results: dict[str, float]
) -> None:
    """Each installed peer at the same rate on the same core: its marginal CPU per token event (runs of n and 2n
    requests, the same method as ours) and its latency figures; the best peer's per-core figure against ours."""
    best_peer = float("nan")
    for name in llm_peers.installed():
        runs = [
            llm_peers.run(name, llm_peers.Load(base_url, "fake", model_dir, rate, k, 16, tokens, core=core)) for k in (n, 2 * n)
        ]
        if not all(r.ok for r in runs):
            print(f"  {name}: failed: {next(r.note for r in runs if not r.ok)}")
            continue
        events = [r.figures["completed"] * tokens for r in runs]
        us = 1e6 * (runs[1].cpu_s - runs[0].cpu_s) / max(events[1] - events[0], 1)
        f = runs[1].figures
        print(
            f"  {name} at {rate:g} req/s: {us:.2f} CPU us per token event (marginal, {n} and {2 * n} requests; "
            f"{runs[1].cpu_s:.1f} CPU s in all for the longer run); its TTFT p50/p99 {f['ttft_p50']:.2f}/"
            f"{f['ttft_p99']:.2f} ms, ITL p50/p99 {f['itl_p50']:.2f}/{f['itl_p99']:.2f} ms"
        )
        key = name.split()[0].lower()
        results[f"{key}_cpu_us_per_event"] = us
        if us > 0 and not (best_peer <= us):
            best_peer = us
    if best_peer == best_peer and ours_us > 0:
        results["ours_vs_best_peer_per_core"] = best_peer / ours_us
        print(f"  per core, benchfleet carries {best_peer / ours_us:.2f}x the token events of the best peer")


@contextlib.contextmanager
def vllm_server(data: bytes) -> Iterator[tuple[VllmBackend, ModelMeta]]:
    """The canonical LLM served by the follower's vLLM backend, as a job would start it."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "m.zip"
        path.write_bytes(data)
        meta = ModelMeta(
            name="tiny",
            version="1",
            format="hf",
            inputs=[],
            outputs=[],
            sha256="-",
            size_bytes=len(data),
            created_at=datetime.now(UTC),
            llm=hfbundle.describe(io.BytesIO(data), 10**9),
        )
        backend = VllmBackend()
        backend.start(path, meta, Path(tmp) / "work")
        try:
            backend.wait_ready(600)
            yield backend, meta
        finally:
            backend.stop()


def _server_view(backend: VllmBackend, before: dict[str, Any]) -> str:
    view = llm_server_delta(before, backend.stats())
    if view is None:
        return "no server metrics"
    q = view.quantiles
    return " ".join(
        f"{k} {v.ms:.1f} [{v.low_ms:g}, {v.high_ms if v.high_ms is not None else 'inf'}]" for k, v in sorted(q.items())
    )


def agreement(
    args: argparse.Namespace,
    backend: VllmBackend,
    meta: ModelMeta,
    model_dir: Path,
    maker: PromptMaker,
    results: dict[str, float],
) -> None:
    """Every client against the same vLLM at the same Poisson rate, count and lengths, one after the other; each row
    beside vLLM's own histograms over that client's run (the quantile's estimate and the bucket edges that bound it)."""
    rate, n, inp, out = args.agree_rate, args.agree_requests, 32, 16
    print(
        f"3. agreement: vLLM (CPU build, canonical LLM), {n} requests at {rate:g} req/s (Poisson), {inp} prompt and "
        f"{out} output tokens each; TTFT from the send for every tool (ours from the intended time beside it)"
    )
    print(f"{'client':>17} {'TTFT p50':>9} {'p99':>8} {'ITL p50':>8} {'p99':>8}   server (ms, [bucket])")
    offsets = arrival_offsets_ns("poisson", rate, n / rate, seed=7)[:n]
    workload = LlmWorkload(prompt_tokens=TokenLengths(mean=inp), output_tokens=TokenLengths(mean=out))
    bodies, index, held, asked = llm_bodies(workload, meta.name, maker, len(offsets), seed=7)
    before = backend.stats()
    rec = drive(backend.serves(meta), bodies, offsets, body_index=index, max_concurrency=4096, timeout_s=60, drain_s=30)
    judged = llm_figures(rec, n / rate, (held, asked), workload, None, maker)
    rows: dict[str, dict[str, float]] = {}
    f = judged.figures if judged is not None else None
    if f is not None and f.ttft_sent_ms is not None and f.itl_ms is not None and f.ttft_ms is not None:
        sent, itl, intended = f.ttft_sent_ms, f.itl_ms, f.ttft_ms
        rows["benchfleet"] = {"ttft_p50": sent.p50, "ttft_p99": sent.p99, "itl_p50": itl.p50, "itl_p99": itl.p99}
        print(
            f"{'benchfleet':>17} {sent.p50:9.2f} {sent.p99:8.2f} {itl.p50:8.2f} {itl.p99:8.2f}   {_server_view(backend, before)}"
        )
        print(f"{'  (from intended)':>17} {intended.p50:9.2f} {intended.p99:8.2f}")
    base = backend.endpoint
    for name in llm_peers.installed():
        before = backend.stats()
        run = llm_peers.run(name, llm_peers.Load(base, meta.name, model_dir, rate, n, inp, out, seed=7))
        if not run.ok:
            print(f"{name:>17} failed: {run.note}")
            continue
        f2 = run.figures
        rows[name] = f2
        print(
            f"{name:>17} {f2['ttft_p50']:9.2f} {f2['ttft_p99']:8.2f} {f2['itl_p50']:8.2f} {f2['itl_p99']:8.2f}   "
            f"{_server_view(backend, before)}"
        )
    ours = rows.get("benchfleet")
    if ours is None:
        return
    for name, f3 in rows.items():
        key = name.split()[0].lower()
        for fig in ("ttft_p50", "ttft_p99", "itl_p50", "itl_p99"):
            results[f"agree_{key}_{fig}_ms"] = f3[fig]
    spread = {fig: max(abs(f3[fig] / ours[fig] - 1) for f3 in rows.values()) for fig in ("ttft_p50", "itl_p50")}
    results |= {f"agree_max_dev_{fig}": v for fig, v in spread.items()}
    print("  largest deviation from benchfleet's figure: " + ", ".join(f"{k} {100 * v:.1f}%" for k, v in spread.items()))


def _pause_when_flowing(backend: VllmBackend, after_s: float, stall_s: float) -> threading.Thread:
    """A thread that waits until the server has answered its first request, then `after_s`, then pauses the server
    for `stall_s` (SIGSTOP, SIGCONT): the same stall whatever a client's start-up time."""
    pid = backend.process.pid if backend.process is not None else None

    def answered() -> float:
        metrics = backend.stats().get("metrics", {})
        return sum(v for k, v in metrics.items() if k.startswith("vllm:request_success_total"))

    def run() -> None:
        base = answered()
        deadline = time.monotonic() + 300
        while answered() <= base and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(after_s)
        if pid is not None:
            os.killpg(pid, signal.SIGSTOP)
            time.sleep(stall_s)
            os.killpg(pid, signal.SIGCONT)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def stall(
    args: argparse.Namespace,
    backend: VllmBackend,
    meta: ModelMeta,
    model_dir: Path,
    maker: PromptMaker,
    results: dict[str, float],
) -> None:
    """The server paused mid-run under each client in turn; TTFT as each reports it."""
    rate, duration = args.stall_rate, args.stall_duration
    offsets = arrival_offsets_ns("poisson", rate, duration, seed=3)
    workload = LlmWorkload(prompt_tokens=TokenLengths(mean=32), output_tokens=TokenLengths(mean=16))
    bodies, index, _, _ = llm_bodies(workload, meta.name, maker, len(offsets), seed=2)
    pauser = _pause_when_flowing(backend, duration / 2, args.stall_s)
    rec = drive(backend.serves(meta), bodies, offsets, body_index=index, max_concurrency=4096, timeout_s=60, drain_s=30)
    pauser.join()
    cols = rec.llm
    assert cols is not None
    first = cols.first_token_ns()
    has = rec.ok & (first >= 0)
    intended = (first[has] - rec.intended_ns[has]) / 1e6
    sent = (first[has] - rec.sent_ns[has]) / 1e6
    print(f"2. stall: vLLM paused {args.stall_s:g} s mid-run at {rate:g} req/s ({len(offsets)} requests, Poisson)")
    print(f"{'client':>17} {'TTFT p50':>9} {'p99':>8}")
    print(
        f"{'benchfleet':>17} {_pct(intended, 50):9.1f} {_pct(intended, 99):8.1f}   from the intended time; "
        f"from the send {_pct(sent, 50):.1f} / {_pct(sent, 99):.1f}; {int(has.sum())}/{len(rec)} answered"
    )
    results |= {
        "stall_ttft_p99_intended_ms": _pct(intended, 99),
        "stall_ttft_p99_sent_ms": _pct(sent, 99),
        "stall_ttft_p50_intended_ms": _pct(intended, 50),
    }
    for name in llm_peers.installed():
        pauser = _pause_when_flowing(backend, duration / 2, args.stall_s)
        run = llm_peers.run(name, llm_peers.Load(backend.endpoint, meta.name, model_dir, rate, len(offsets), 32, 16, seed=3))
        pauser.join()
        if not run.ok:
            print(f"{name:>17} failed: {run.note}")
            continue
        f = run.figures
        print(f"{name:>17} {f['ttft_p50']:9.1f} {f['ttft_p99']:8.1f}   as it reports (from its send)")
        results[f"stall_{name.split()[0].lower()}_ttft_p99_ms"] = f["ttft_p99"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sections", type=int, nargs="+", default=[1, 2, 3, 4, 5])
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--gap-ms", type=float, default=2.0)
    parser.add_argument("--rates", type=float, nargs="+", default=[100, 300, 500, 700, 1100, 1300, 1500])
    parser.add_argument("--peer-rate", type=float, default=500.0, help="the most at which the clients are compared")
    parser.add_argument("--skip-peers", action="store_true", help="benchfleet alone (the peers take minutes)")
    parser.add_argument("--duration", type=float, default=5.0)
    parser.add_argument("--stall-rate", type=float, default=10.0)
    parser.add_argument("--stall-duration", type=float, default=10.0)
    parser.add_argument("--stall-s", type=float, default=1.0)
    parser.add_argument("--agree-rate", type=float, default=4.0)
    parser.add_argument("--agree-requests", type=int, default=80)
    parser.add_argument("--long-prompt", type=int, default=100_000)
    parser.add_argument("--long-output", type=int, default=4_000)
    parser.add_argument("--long-gap-ms", type=float, default=0.1)
    parser.add_argument("--long-requests", type=int, default=5)
    parser.add_argument("--session-turns", type=int, default=12)
    parser.add_argument("--session-think-s", type=float, default=0.3)
    parser.add_argument("--session-rate", type=float, default=1.0)
    parser.add_argument("--session-duration", type=float, default=30.0)
    args = parser.parse_args()
    data, _ = generate(SPEC)
    maker = PromptMaker(*hfbundle.tokenizer_files(io.BytesIO(data), 10**9))
    results: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = hfbundle.extract(io.BytesIO(data), Path(tmp) / "model", 10**9)
        if 1 in args.sections:
            ceiling(args, model_dir, maker, results)
        if 4 in args.sections:
            long_context(args, maker, results)
        if {2, 3, 5} & set(args.sections):
            ok, why = VllmBackend.available()
            if not ok:
                print(f"2, 3, 5: not run ({why})")
            else:
                # Every client measured as the follower measures: idle CPUs held out of deep sleep (wake-up latency 0).
                with vllm_server(data) as (backend, meta), hold_wakeup_latency(0):
                    if 3 in args.sections:
                        agreement(args, backend, meta, model_dir, maker, results)
                    if 2 in args.sections:
                        stall(args, backend, meta, model_dir, maker, results)
                    if 5 in args.sections:
                        sessions(args, backend, meta, maker, results)
    print("RESULT llm " + " ".join(f"{k}={v:.4g}" for k, v in results.items()))


if __name__ == "__main__":
    main()
