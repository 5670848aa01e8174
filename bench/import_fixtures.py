"""Makes the import tests' fixtures: real result files of the real peer tools, run here against local fake servers.

Each peer runs from its own environment (bench/install_peers.sh; `vllm bench serve` from vLLM's) against
bench/fake_llm_fast.py (an OpenAI-compatible streaming server: first token 5 ms after arrival, then one every 2 ms)
or, for perf_analyzer, a KServe v2 server answering at once (bench/wire_tensor.py). Each writes its own result files
under tests/fixtures/imports/<tool>/, small enough to commit; the argv each ran with is written beside them in
COMMAND.txt (paths under the temporary directory shown as they were). A peer that is not installed is skipped and
named. Nothing here is asserted: the import tests read what this wrote.

Usage: .venv/bin/python bench/import_fixtures.py [--tools vllm aiperf guidellm inference-perf genai-bench perf_analyzer loadgen]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import llm_peers  # noqa: E402
from llm_peers import PEERS_DIR, Load  # noqa: E402
from wire_tensor import PERF_ANALYZER, fast_server  # noqa: E402

from benchfleet.generate.llmgen import LlamaSpec, generate  # noqa: E402
from common.formats import hfbundle  # noqa: E402
from common.procs import SupervisedProcess, free_port, http_ready  # noqa: E402

OUT = ROOT / "tests" / "fixtures" / "imports"
FAKE = ROOT / "bench" / "fake_llm_fast.py"
SPEC = LlamaSpec(layers=2, hidden=128, heads=4, kv_heads=4, intermediate=256, vocab=2048, context=512, seed=5)
RATES = (4.0, 8.0)  # two load levels, so a file that holds several shows them
N = 16  # requests per level
TOKENS = 16  # input and output tokens per request


def _save(tool: str, argv: list[str], files: list[Path], command: str = "COMMAND.txt") -> None:
    dest = OUT / tool
    dest.mkdir(parents=True, exist_ok=True)
    for f in files:
        shutil.copy(f, dest / f.name)
    (dest / command).write_text(" ".join(argv) + "\n")
    print(f"{tool}: {', '.join(f.name for f in files)}")


def _run(argv: list[str], cwd: Path | None = None) -> None:
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=900, cwd=cwd, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    if proc.returncode != 0:
        raise RuntimeError(f"{argv[0]} exited {proc.returncode}: {(proc.stdout + proc.stderr)[-2000:]}")


def vllm(load: Load, tmp: Path) -> None:
    out = tmp / f"vllm-bench-serve-{load.rate:g}.json"
    argv = [*llm_peers.vllm_bench_argv(load), "--save-result", "--save-detailed", "--result-filename", str(out)]
    argv += ["--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,90,99"]
    _run(argv)
    _save("vllm", argv, [out], f"COMMAND-{load.rate:g}.txt")


def aiperf(load: Load, tmp: Path) -> None:
    art = tmp / "aiperf"
    argv = [str(PEERS_DIR / "aiperf" / "bin" / "aiperf"), "profile", "-m", load.model, "--url", load.base_url]
    argv += ["--endpoint-type", "completions", "--streaming", "--tokenizer", str(load.tokenizer_dir)]
    argv += ["--request-rate", str(load.rate), "--arrival-pattern", "poisson", "--request-count", str(load.n)]
    argv += ["--prompt-input-tokens-mean", str(load.input_tokens), "--prompt-input-tokens-stddev", "0"]
    argv += ["--prompt-output-tokens-mean", str(load.output_tokens), "--prompt-output-tokens-stddev", "0"]
    argv += ["--extra-inputs", "ignore_eos:true", "--use-server-token-count", "--random-seed", str(load.seed)]
    argv += ["--ui-type", "none", "--output-artifact-dir", str(art), "--no-server-metrics", "--no-gpu-telemetry"]
    _run(argv)
    _save("aiperf", argv, [art / "profile_export_aiperf.json", art / "profile_export.jsonl"])


def guidellm(load: Load, tmp: Path) -> None:
    out = tmp / "benchmarks.json"
    argv = llm_peers.guidellm_argv(load, {"kind": "constant", "rate": list(RATES)}, out, tmp)
    _run(argv)
    _save("guidellm", argv, [out])


def inference_perf(load: Load, tmp: Path) -> None:
    length = {"min": load.input_tokens, "max": load.input_tokens, "mean": load.input_tokens, "std_dev": 0}
    output = {"min": load.output_tokens, "max": load.output_tokens, "mean": load.output_tokens, "std_dev": 0}
    config = {
        "load": {
            "type": "poisson",
            "stages": [{"rate": rate, "duration": round(load.n / rate)} for rate in RATES],
            "num_workers": 1,
            "base_seed": load.seed,
        },
        "api": {"type": "completion", "streaming": True},
        "server": {"type": "vllm", "model_name": load.model, "base_url": load.base_url, "ignore_eos": True},
        "tokenizer": {"pretrained_model_name_or_path": str(load.tokenizer_dir)},
        "data": {"type": "random", "input_distribution": length, "output_distribution": output},
        "report": {"request_lifecycle": {"summary": True, "per_stage": True, "per_request": False}},
        "storage": {"local_storage": {"path": str(tmp / "ip")}},
    }
    path = tmp / "config.json"
    path.write_text(json.dumps(config))
    argv = [str(PEERS_DIR / "inference-perf" / "bin" / "inference-perf"), "--config_file", str(path)]
    _run(argv)
    reports = sorted((tmp / "ip").rglob("*.json"))
    _save("inference-perf", argv, [path, *reports])


def genai_bench(load: Load, tmp: Path) -> None:
    exp = tmp / "genai"
    argv = [str(PEERS_DIR / "genai-bench" / "bin" / "genai-bench"), "benchmark", "--api-backend", "openai"]
    argv += ["--api-base", load.base_url, "--api-key", "none", "--api-model-name", load.model]
    argv += ["--model-tokenizer", str(load.tokenizer_dir), "--task", "text-to-text"]
    argv += ["--traffic-scenario", f"D({load.input_tokens},{load.output_tokens})", "--num-concurrency", "1"]
    argv += ["--num-concurrency", "2", "--max-requests-per-run", str(load.n), "--max-time-per-run", "1"]
    argv += ["--server-engine", "vLLM", "--experiment-base-dir", str(exp)]
    argv += ["--experiment-folder-name", "fixture"]
    _run(argv, cwd=tmp)
    files = sorted(p for p in (exp / "fixture").glob("*.json"))
    _save("genai-bench", argv, files)


def perf_analyzer(tmp: Path) -> None:
    out = tmp / "perf_analyzer.csv"
    with fast_server(core=1) as url:
        argv = [str(PERF_ANALYZER), "-m", "m", "-u", url.removeprefix("http://"), "-i", "http", "--shape", "x:1,4"]
        argv += ["--request-rate-range", f"{100:g}:{200:g}:100", "--request-distribution", "poisson"]
        argv += [
            "--measurement-interval",
            "1000",
            "--stability-percentage",
            "999",
            "--percentile",
            "99",
            "-f",
            str(out),
            "--verbose-csv",
        ]
        _run(argv)
    _save("perf_analyzer", argv, [out])


def loadgen(load: Load, tmp: Path) -> None:
    """MLPerf LoadGen's Server scenario with token latencies, its system under test streaming from the fake server."""
    argv = [str(PEERS_DIR / "loadgen" / "bin" / "python"), str(ROOT / "bench" / "loadgen_sut.py"), load.base_url, str(tmp)]
    argv += [str(RATES[0]), str(load.output_tokens)]
    _run(argv, cwd=tmp)
    _save("loadgen", argv, [tmp / "mlperf_log_summary.txt", tmp / "mlperf_log_detail.txt"])


def main() -> None:
    tools = ["vllm", "aiperf", "guidellm", "inference-perf", "genai-bench", "perf_analyzer", "loadgen"]
    parser = argparse.ArgumentParser()
    parser.add_argument("--tools", nargs="+", default=tools, choices=tools)
    args = parser.parse_args()
    data, _ = generate(SPEC)
    with tempfile.TemporaryDirectory() as tmp_s:
        tmp = Path(tmp_s)
        model_dir = hfbundle.extract(io.BytesIO(data), tmp / "model", 10**9)
        port = free_port()
        argv = [sys.executable, str(FAKE), "--port", str(port), "--ttft-ms", "5", "--gap-ms", "2"]
        with SupervisedProcess(argv, name="fake LLM", log_path=tmp / "fake.log") as proc:
            base = f"http://127.0.0.1:{port}"
            proc.wait_ready(http_ready(f"{base}/v1/models"), timeout_s=30)
            for tool in args.tools:
                work = tmp / tool
                work.mkdir()
                load = Load(base, "fake", model_dir, RATES[0], N, TOKENS, TOKENS, seed=7)
                env = {"vllm": ROOT / ".benchfleet" / "vllm", "perf_analyzer": PERF_ANALYZER.parent}.get(tool, PEERS_DIR / tool)
                if not env.exists():
                    print(f"{tool}: not installed ({env} missing; bench/install_peers.sh makes it)")
                    continue
                shutil.rmtree(OUT / tool, ignore_errors=True)
                if tool == "vllm":
                    for rate in RATES:
                        vllm(Load(base, "fake", model_dir, rate, N, TOKENS, TOKENS, seed=7), work)
                elif tool == "aiperf":
                    aiperf(load, work)
                elif tool == "guidellm":
                    guidellm(load, work)
                elif tool == "inference-perf":
                    inference_perf(load, work)
                elif tool == "genai-bench":
                    genai_bench(load, work)
                elif tool == "perf_analyzer":
                    perf_analyzer(work)
                else:
                    loadgen(load, work)


if __name__ == "__main__":
    main()
