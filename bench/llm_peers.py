"""The peer LLM benchmark clients bench/llm.py runs beside benchfleet, each in its own environment (never ours).

`vllm bench serve` runs from vLLM's environment (.benchfleet/vllm, or BENCHFLEET_FOLLOWER_VLLM_PYTHON); AIPerf and
GuideLLM from virtual environments under BENCHFLEET_PEERS (default ~/.cache/benchfleet/peers), which
bench/install_peers.sh makes. A peer that is not installed is reported as such and skipped.

Each run is one subprocess, pinned to a core with taskset where one is given. Its CPU is the run's children's CPU
(getrusage(RUSAGE_CHILDREN) before and after: the peer and every worker process it waited for), start-up included;
bench/llm.py takes the difference between a run of n and one of 2n requests, so start-up and imports cancel out.
Its figures (TTFT and inter-token latency p50/p99, in ms) are read from the peer's own result file.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PEERS_DIR = Path(os.environ.get("BENCHFLEET_PEERS", Path.home() / ".cache" / "benchfleet" / "peers"))


@dataclass(frozen=True)
class Load:
    """What every client is asked to send: the same rate, count, lengths and seed."""

    base_url: str  # http://host:port, no path
    model: str
    tokenizer_dir: Path
    rate: float
    n: int
    input_tokens: int
    output_tokens: int
    seed: int = 1
    core: int | None = None


@dataclass
class PeerRun:
    tool: str
    ok: bool
    cpu_s: float = float("nan")
    figures: dict[str, float] = field(default_factory=dict)  # ttft_p50, ttft_p99, itl_p50, itl_p99 (ms)
    note: str = ""


def _python(tool: str) -> Path:
    if tool == "vllm":
        return Path(os.environ.get("BENCHFLEET_FOLLOWER_VLLM_PYTHON", ROOT / ".benchfleet" / "vllm" / "bin" / "python"))
    return PEERS_DIR / tool / "bin" / "python"


def _run(tool: str, argv: list[str], load: Load, out: Path, parse: Callable[[Path], dict[str, float]]) -> PeerRun:
    if load.core is not None:
        argv = ["taskset", "-c", str(load.core), *argv]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=900, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if proc.returncode != 0 or not out.exists():
        return PeerRun(tool, False, cpu, note=f"exit {proc.returncode}: {(proc.stdout + proc.stderr)[-400:]}")
    try:
        return PeerRun(tool, True, cpu, parse(out))
    except (KeyError, ValueError, TypeError, IndexError) as exc:
        return PeerRun(tool, False, cpu, note=f"unreadable result: {exc!r}")


def vllm_bench_argv(load: Load, *, with_rate: bool = True) -> list[str]:
    """`vllm bench serve` from vLLM's environment, asked what every client here is asked (`with_rate` False: no
    --request-rate, for a caller that sets it, as serve_sla does)."""
    code = (
        "import argparse, sys\nfrom vllm.benchmarks.serve import add_cli_args, main\n"
        "p = argparse.ArgumentParser(); add_cli_args(p); main(p.parse_args(sys.argv[1:]))\n"
    )
    argv = [
        str(_python("vllm")),
        "-c",
        code,
        "--backend",
        "openai",
        "--base-url",
        load.base_url,
        "--endpoint",
        "/v1/completions",
        "--model",
        load.model,
        "--tokenizer",
        str(load.tokenizer_dir),
        "--dataset-name",
        "random",
        "--random-input-len",
        str(load.input_tokens),
        "--random-output-len",
        str(load.output_tokens),
        "--num-prompts",
        str(load.n),
        "--ignore-eos",
        "--seed",
        str(load.seed),
    ]
    return [*argv, "--request-rate", str(load.rate)] if with_rate else argv


def vllm_bench(load: Load, tmp: Path) -> PeerRun:
    out = tmp / "vllm.json"
    argv = [
        *vllm_bench_argv(load),
        "--percentile-metrics",
        "ttft,itl",
        "--metric-percentiles",
        "50,99",
        "--save-result",
        "--result-filename",
        str(out),
    ]

    def parse(path: Path) -> dict[str, float]:
        d = json.loads(path.read_text())
        return {
            "ttft_p50": d["p50_ttft_ms"],
            "ttft_p99": d["p99_ttft_ms"],
            "itl_p50": d["p50_itl_ms"],
            "itl_p99": d["p99_itl_ms"],
            "completed": d["completed"],
        }

    return _run("vllm bench serve", argv, load, out, parse)


def aiperf(load: Load, tmp: Path) -> PeerRun:
    """AIPerf with the server's token counts (--use-server-token-count), so its per-token figures divide by the tokens
    the server produced, as ours and vLLM's do."""
    art = tmp / "aiperf"
    argv = [
        str(PEERS_DIR / "aiperf" / "bin" / "aiperf"),
        "profile",
        "-m",
        load.model,
        "--url",
        load.base_url,
        "--endpoint-type",
        "completions",
        "--streaming",
        "--tokenizer",
        str(load.tokenizer_dir),
        "--request-rate",
        str(load.rate),
        "--arrival-pattern",
        "poisson",
        "--request-count",
        str(load.n),
        "--prompt-input-tokens-mean",
        str(load.input_tokens),
        "--prompt-input-tokens-stddev",
        "0",
        "--prompt-output-tokens-mean",
        str(load.output_tokens),
        "--prompt-output-tokens-stddev",
        "0",
        "--extra-inputs",
        "ignore_eos:true",
        "--use-legacy-max-tokens",
        "--use-server-token-count",
        "--random-seed",
        str(load.seed),
        "--ui-type",
        "none",
        "--output-artifact-dir",
        str(art),
        "--no-server-metrics",
        "--no-gpu-telemetry",
    ]

    def parse(path: Path) -> dict[str, float]:
        d = json.loads(path.read_text())
        ttft, itl = d["time_to_first_token"], d["inter_token_latency"]
        return {
            "ttft_p50": ttft["p50"],
            "ttft_p99": ttft["p99"],
            "itl_p50": itl["p50"],
            "itl_p99": itl["p99"],
            "completed": d["request_count"]["avg"],
        }

    return _run("AIPerf", argv, load, art / "profile_export_aiperf.json", parse)


def guidellm_argv(load: Load, profile: dict[str, object], out: Path, tmp: Path) -> list[str]:
    """GuideLLM's command line for `load` under `profile` (its scenario file written into `tmp`), its JSON to `out`."""
    scenario = {
        "spec": {
            "backend": {"kind": "openai_http", "target": load.base_url, "model": load.model, "request_format": "/v1/completions"},
            "profile": profile,
            "data": [{"kind": "synthetic_text", "prompt_tokens": load.input_tokens, "output_tokens": load.output_tokens}],
            "tokenizer": {"kind": "huggingface_auto", "model": str(load.tokenizer_dir)},
            "constraints": [{"kind": "max_requests", "count": load.n}],
            "outputs": [{"kind": "json", "path": str(out)}],
        }
    }
    config = tmp / "guidellm-scenario.json"
    config.write_text(json.dumps(scenario))
    return [str(PEERS_DIR / "guidellm" / "bin" / "guidellm"), "run", "--config", str(config), "--disable-console"]


def guidellm(load: Load, tmp: Path) -> PeerRun:
    """GuideLLM asks for exact output lengths itself (max_tokens with ignore_eos)."""
    out = tmp / "guidellm.json"
    argv = guidellm_argv(load, {"kind": "poisson", "rate": load.rate}, out, tmp)

    def parse(path: Path) -> dict[str, float]:
        m = json.loads(path.read_text())["benchmarks"][0]["metrics"]
        ttft, itl = m["time_to_first_token_ms"]["successful"], m["inter_token_latency_ms"]["successful"]
        return {
            "ttft_p50": ttft["percentiles"]["p50"],
            "ttft_p99": ttft["percentiles"]["p99"],
            "itl_p50": itl["percentiles"]["p50"],
            "itl_p99": itl["percentiles"]["p99"],
            "completed": m["time_to_first_token_ms"]["successful"]["count"],
        }

    return _run("GuideLLM", argv, load, out, parse)


PEERS: dict[str, tuple[str, Callable[[Load, Path], PeerRun]]] = {
    "vllm bench serve": ("vllm", vllm_bench),
    "AIPerf": ("aiperf", aiperf),
    "GuideLLM": ("guidellm", guidellm),
}


def installed() -> dict[str, Callable[[Load, Path], PeerRun]]:
    """The peers whose environment is here; the others are named on stdout as not installed."""
    found = {}
    for name, (env, run) in PEERS.items():
        if _python(env).exists():
            found[name] = run
        else:
            print(f"  {name}: not installed ({_python(env).parent.parent} missing; bench/install_peers.sh makes it)")
    return found


def run(name: str, load: Load) -> PeerRun:
    with tempfile.TemporaryDirectory() as tmp:
        return PEERS[name][1](load, Path(tmp))
