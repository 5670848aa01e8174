"""benchfleet's error budget against the wire, and its peers' beside it, measured in one run.

LLM half: one vLLM 0.32 (CPU build) serves the canonical LLM. At each rate (--rates, default 2, 8 and 16 req/s;
Poisson; 48-token prompts, --output-tokens generated, EOS ignored) the clients take turns on it, each pinned as
benchfleet's generator is (its own core, real-time priority):
- benchfleet: an endpoint job with `audit: wire` on a local leader and follower (the product's own path). The point's
  wire audit matches each request to its packets and reports each figure by the same definition on both clocks.
- `vllm bench serve` (vLLM 0.32's own client) and inference-perf (Kubernetes wg-serving's, bench/install_peers.sh),
  while this bench captures the server's port with the follower's capture (follower/host/wirecap.py) and reads the
  packets back with the audit's reader (follower/loadgen/wireaudit.py). Their per-request TTFTs and ITLs (their own
  detailed reports) are held against the wire's distribution over their run; and since both stamp on the same
  monotonic clock as benchfleet (perf_counter), their requests are matched to the wire's by order as the audit
  matches benchfleet's, for each client's error budget side by side: send overhead (start stamp to first byte out)
  and token-event overhead (last byte in to stamp; inference-perf's only where its count agrees: it skips empty-text
  events).
TTFT is from each client's own start stamp (on the wire: the request's first byte leaving) and ITL between token
events; p50 and p99 by the nearest rank (common/stats.py) on every side, so only the clocks differ.

Tensor half (bench/wire_tensor.py): benchfleet and Triton's perf_analyzer against a KServe v2 server that answers at
once: latency against the wire, CPU per request, the highest valid rate.

Needs root (CAP_NET_RAW). Nothing is asserted: the tables and the RESULT line say how far each client lies from the
wire (`*_worst_err_pct`: the largest p50 or p99 error over the rates and figures; `benchfleet_nearest`: in how many
rate-figure pairs benchfleet lay nearest the wire).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import wire_tensor  # noqa: E402
from llm import SPEC, vllm_server  # noqa: E402
from llm_peers import PEERS_DIR, Load, vllm_bench_argv  # noqa: E402

from benchfleet.generate.llmgen import generate  # noqa: E402
from benchfleet.stack import LocalStack  # noqa: E402
from common.formats import hfbundle  # noqa: E402
from common.procs import free_port  # noqa: E402
from common.stats import quantile  # noqa: E402
from common.wire.audit import Spread, WireAudit  # noqa: E402
from follower.backends.vllm import VllmBackend  # noqa: E402
from follower.host.wirecap import Captured, clock_offset_ns, open_capture  # noqa: E402
from follower.loadgen.records import LoadRecords  # noqa: E402
from follower.loadgen.wireaudit import match, wire_requests  # noqa: E402

PROMPT_TOKENS = 48
Pairs = tuple[tuple[float, float], tuple[float, float]]  # (client p50, p99), (wire p50, p99), ms
FIGURES = ("ttft", "itl")


def _job_yaml(rate: float, seconds: float, output_tokens: int, endpoint: str, model: str) -> str:
    return f"""\
name: wire-audit-{rate:g}
model: {{ref: "{model}:1"}}
load: {{pattern: poisson, rate: {rate:g}, duration: {seconds:g}s, warmup: 2s, allow_short: true}}
llm: {{prompt_tokens: {PROMPT_TOKENS}, output_tokens: {output_tokens}}}
target: {{url: "{endpoint}", protocol: openai}}
audit: wire
"""


def benchfleet_point(stack: LocalStack, yaml: str) -> WireAudit:
    """benchfleet's audit of one point (wire_tensor.audited_point)."""
    wire = wire_tensor.audited_point(stack, yaml).wire
    assert wire is not None
    return wire


def _p(values: list[float]) -> tuple[float, float]:
    array = np.asarray(values, dtype=float)
    return quantile(array, 0.5), quantile(array, 0.99)


def vllm_client(load: Load, core: int) -> PeerRun:
    """vLLM's client: per figure its p50 and p99 beside the wire's over its run, and its per-request error budget
    (its token events at start + TTFT + the running sum of its ITLs, as it stamped them)."""
    with tempfile.TemporaryDirectory() as tmp:
        prefix = ["taskset", "-c", str(core), *(["chrt", "-f", "50"] if os.geteuid() == 0 else [])]
        argv = [*prefix, *vllm_bench_argv(load), "--save-result", "--save-detailed", "--result-dir", tmp]
        captured = _captured_run(f"{load.base_url}/v1/completions", [*argv, "--result-filename", "run.json"], Path(tmp))
        detail = json.loads((Path(tmp) / "run.json").read_text())
    ttfts = [1e3 * t for t in detail["ttfts"] if t and t > 0]
    itls = [1e3 * g for gaps in detail["itls"] for g in gaps]
    answered = [(st, t, gaps) for st, t, gaps in zip(detail["start_times"], detail["ttfts"], detail["itls"], strict=True) if t]
    tokens = [list(st + t + np.concatenate([[0.0], np.cumsum(gaps)])) for st, t, gaps in answered]
    return peer_run(captured, _wire_pairs(captured, ttfts, itls), [a[0] for a in answered], tokens)


INFERENCE_PERF = PEERS_DIR / "inference-perf" / "bin" / "inference-perf"


@dataclass
class PeerRun:
    """A peer's run: its figures beside the wire's, and its per-request error budget where it could be matched."""

    pairs: dict[str, Pairs]
    send_us: Spread | None  # from its start stamp to the request's first byte leaving
    token_us: Spread | None  # from each token event's last byte arriving to its stamp (requests whose counts agree)
    matched: int
    requests: int


def _us(values: list[int]) -> Spread | None:
    if not values:
        return None
    us = np.asarray(values, dtype=float) / 1e3
    return Spread(count=len(us), p50=quantile(us, 0.5), p99=quantile(us, 0.99), max=float(us.max()))


def peer_run(captured: Captured, pairs: dict[str, Pairs], starts_s: list[float], tokens_s: list[list[float]]) -> PeerRun:
    """A peer's error budget: its requests (start stamps and token times in perf_counter seconds, CLOCK_MONOTONIC as
    the generator's clock) matched to the wire's by order, as the audit matches benchfleet's (wireaudit.match)."""
    records = LoadRecords.allocate(0, np.zeros(len(starts_s), dtype=np.int64))
    records.sent_ns[:] = np.round(np.asarray(starts_s) * 1e9).astype(np.int64)
    records.status[:] = 200
    offset = clock_offset_ns()
    matched = match(records, wire_requests(captured), offset)
    send, token = [], []
    for i, request in matched.items():
        answer = request.answer
        if answer is None or not answer.token_ns:
            continue
        send.append(request.send_ns - offset - int(records.sent_ns[i]))
        stamps = np.round(np.asarray(tokens_s[i]) * 1e9).astype(np.int64)
        if len(stamps) == len(answer.token_ns):
            token.extend((stamps - (np.asarray(answer.token_ns) - offset)).tolist())
    return PeerRun(pairs, _us(send), _us(token), len(matched), len(starts_s))


def _captured_run(url: str, argv: list[str], cwd: Path) -> Captured:
    """Run a peer's command while capturing the server's port; the packets."""
    opened = open_capture(url)
    if isinstance(opened, str):
        raise RuntimeError(opened)
    capture = opened.start()
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=1200, cwd=cwd)
    finally:
        captured = capture.stop()
    if proc.returncode != 0:
        raise RuntimeError(f"{Path(argv[0]).name} exited {proc.returncode}: {(proc.stdout + proc.stderr)[-1500:]}")
    if captured.drops:
        print(f"    (the kernel dropped {captured.drops} packets of the run)")
    return captured


def _wire_pairs(captured: Captured, ttfts: list[float], itls: list[float]) -> dict[str, Pairs]:
    """A client's TTFT and ITL (ms) beside the wire's over the same run."""
    answered = [r.answer for r in wire_requests(captured) if r.answer is not None and r.answer.token_ns]
    sends = [r.send_ns for r in wire_requests(captured) if r.answer is not None and r.answer.token_ns]
    wire_ttft = [(a.token_ns[0] - s) / 1e6 for a, s in zip(answered, sends, strict=True)]
    wire_itl = [float(g) / 1e6 for a in answered for g in np.diff(a.token_ns)]
    return {"ttft": (_p(ttfts), _p(wire_ttft)), "itl": (_p(itls), _p(wire_itl))}


def inference_perf(load: Load, core: int) -> PeerRun:
    """inference-perf (Kubernetes wg-serving's, Python 3.12, its own environment) at the same rate and lengths, one
    worker process pinned like the others; its per-request TTFTs and ITLs beside the wire's."""
    with tempfile.TemporaryDirectory() as tmp:
        length = {"min": load.input_tokens, "max": load.input_tokens, "mean": load.input_tokens, "std_dev": 0}
        output = {"min": load.output_tokens, "max": load.output_tokens, "mean": load.output_tokens, "std_dev": 0}
        config = {
            "load": {
                "type": "poisson",
                "stages": [{"rate": load.rate, "duration": max(1, round(load.n / load.rate))}],
                "num_workers": 1,
                "base_seed": load.seed,
            },
            "api": {"type": "completion", "streaming": True},
            "server": {"type": "vllm", "model_name": load.model, "base_url": load.base_url, "ignore_eos": True},
            "tokenizer": {"pretrained_model_name_or_path": str(load.tokenizer_dir)},
            "data": {"type": "random", "input_distribution": length, "output_distribution": output},
            "report": {
                "request_lifecycle": {
                    "summary": True,
                    "per_stage": False,
                    "per_request": True,
                    "per_request_fields": {
                        "request": False,
                        "response": False,
                        "info": True,
                        "response_chunks": False,
                        "computed_metrics": True,
                    },
                }
            },
            "storage": {"local_storage": {"path": tmp}},
        }
        path = Path(tmp) / "config.json"
        path.write_text(json.dumps(config))
        prefix = ["taskset", "-c", str(core), *(["chrt", "-f", "50"] if os.geteuid() == 0 else [])]
        captured = _captured_run(
            f"{load.base_url}/v1/completions", [*prefix, str(INFERENCE_PERF), "--config_file", str(path)], Path(tmp)
        )
        (report,) = Path(tmp).rglob("per_request_lifecycle_metrics.json")
        requests = [r for r in json.loads(report.read_text()) if r.get("error") is None and r.get("computed_metrics")]
    ttfts = [1e3 * r["computed_metrics"]["time_to_first_token"] for r in requests if r["computed_metrics"]["time_to_first_token"]]
    itls = [1e3 * g for r in requests for g in r["computed_metrics"]["inter_token_latencies"]]
    chunks = [(r["info"] or {}).get("response_metrics") or {} for r in requests]
    # Its chunk times: the events with text only (it skips an empty-text token event); counts then differ from the wire's.
    tokens = [list(c.get("chunk_times") or []) for c in chunks]
    return peer_run(captured, _wire_pairs(captured, ttfts, itls), [r["start_time"] for r in requests], tokens)


HEADER = f"{'rate':>5} {'client':<14} {'figure':<5} {'p50 ms':>9} {'wire':>9} {'err':>8} {'p99 ms':>9} {'wire':>9} {'err':>8}"


def compare(rate: float, audit: WireAudit, peers: dict[str, PeerRun], result: dict[str, float]) -> list[dict[str, float]]:
    """Per figure, each client's worst relative error (p50 or p99) against its own wire; the rows printed."""
    errors = []
    for name in FIGURES:
        figure = audit.figure(name)
        assert figure is not None
        rows = {"benchfleet": ((figure.client_p50, figure.client_p99), (figure.wire_p50, figure.wire_p99))}
        rows |= {tool: run.pairs[name] for tool, run in peers.items()}
        worst: dict[str, float] = {}
        for tool, ((c50, c99), (w50, w99)) in rows.items():
            e50, e99 = (c50 - w50) / w50, (c99 - w99) / w99
            cells = f"{c50:9.3f} {w50:9.3f} {100 * e50:+7.2f}% {c99:9.3f} {w99:9.3f} {100 * e99:+7.2f}%"
            print(f"{rate:5g} {tool:<14} {name:<5} {cells}")
            result[f"{tool}_{name}_p50_err_pct_{rate:g}"] = round(100 * e50, 2)
            result[f"{tool}_{name}_p99_err_pct_{rate:g}"] = round(100 * e99, 2)
            worst[tool] = max(abs(e50), abs(e99))
        errors.append(worst)
    budgets = {"benchfleet": (audit.send_us, audit.token_us, audit.matched, audit.matched + audit.unmatched)}
    budgets |= {tool: (run.send_us, run.token_us, run.matched, run.requests) for tool, run in peers.items()}
    for tool, (send, token, matched, requests) in budgets.items():
        spreads = [f"{x.p50:.1f}/{x.p99:.1f} µs ({x.count})" if x else "-" for x in (send, token)]
        print(f"{rate:5g} {tool:<14} budget: send {spreads[0]}, token event {spreads[1]}; {matched} of {requests} matched")
        if send and token:
            result[f"{tool}_send_p99_us_{rate:g}"] = round(send.p99, 1)
            result[f"{tool}_token_p99_us_{rate:g}"] = round(token.p99, 1)
    return errors


def llm_half(stack: LocalStack, args: argparse.Namespace, result: dict[str, float]) -> list[dict[str, float]]:
    """benchfleet, vLLM's client and inference-perf (where installed) in turn on one vLLM, at each rate."""
    data, _ = generate(SPEC)
    core = min(os.sched_getaffinity(0))
    errors: list[dict[str, float]] = []
    if not INFERENCE_PERF.exists():
        print(f"  inference-perf: not installed ({INFERENCE_PERF.parent.parent} missing; bench/install_peers.sh makes it)")
    with tempfile.TemporaryDirectory() as tmp, vllm_server(data) as (backend, meta):
        tokenizer = hfbundle.extract(io.BytesIO(data), Path(tmp) / "model", 10**9)

        def load(rate: float, n: int) -> Load:
            tokens = {"input_tokens": PROMPT_TOKENS, "output_tokens": args.output_tokens}
            return Load(backend.endpoint, meta.name, tokenizer, rate, n, **tokens)

        subprocess.run(vllm_bench_argv(load(50, 200)), capture_output=True, timeout=600, check=True)  # warm it first
        with stack.client() as client:
            client.upload_model(data, name=meta.name, version="1", format="hf")
        print(HEADER)
        for rate in args.rates:
            audit = benchfleet_point(stack, _job_yaml(rate, args.seconds, args.output_tokens, backend.endpoint, meta.name))
            peers = {"vllm": vllm_client(load(rate, int(rate * args.seconds)), core)}
            if INFERENCE_PERF.exists():
                peers["inference-perf"] = inference_perf(load(rate, int(rate * args.seconds)), core)
            errors += compare(rate, audit, peers, result)
    return errors


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--parts", nargs="+", choices=("llm", "tensor"), default=["llm", "tensor"])
    parser.add_argument("--rates", type=float, nargs="+", default=[2.0, 8.0, 16.0], help="the LLM half's rates")
    parser.add_argument("--seconds", type=float, default=40.0, help="the LLM half's measured seconds per run")
    parser.add_argument("--output-tokens", type=int, default=64)
    parser.add_argument("--tensor-rates", type=float, nargs="+", default=[500.0, 2000.0, 4000.0, 8000.0])
    parser.add_argument("--tensor-seconds", type=float, default=12.0)
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("not run: capturing packets needs root (CAP_NET_RAW)")
        print("RESULT wire ran=0")
        return
    result: dict[str, float] = {}
    summary: dict[str, object] = {}
    with tempfile.TemporaryDirectory() as tmp:
        stack = LocalStack(Path(tmp) / "stack", env={"BENCHFLEET_FOLLOWER_METRICS_PORT": str(free_port())})
        with stack:
            stack.start_mongo()
            stack.start_redis()
            stack.start_leader()
            stack.start_follower("local")
            if "llm" in args.parts:
                ok, why = VllmBackend.available()
                if not ok:
                    print(f"LLM half not run: {why}")
                else:
                    errors = llm_half(stack, args, result)
                    for tool in errors[0]:
                        summary[f"{tool}_worst_err_pct"] = round(100 * max(e[tool] for e in errors), 2)
                    nearest = sum(e["benchfleet"] <= min(e.values()) for e in errors)
                    summary["benchfleet_nearest"] = f"{nearest}/{len(errors)}"
            if "tensor" in args.parts:
                print("\ntensor: benchfleet and perf_analyzer against one KServe v2 server that answers at once")
                errors = wire_tensor.run(stack, args.tensor_rates, args.tensor_seconds, result)
                summary["tensor_benchfleet_worst_err_pct"] = round(100 * max(e["benchfleet"] for e in errors), 2)
                if all("perf_analyzer" in e for e in errors):
                    summary["tensor_perf_analyzer_worst_err_pct"] = round(100 * max(e["perf_analyzer"] for e in errors), 2)
    print("RESULT wire " + " ".join(f"{k}={v}" for k, v in {**summary, **result}.items()))


if __name__ == "__main__":
    main()
