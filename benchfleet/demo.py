"""The embedded default: SecantusDB, Redis, a leader and one local follower on this machine, one real benchmark."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from benchfleet.client import ApiError, BenchfleetClient
from benchfleet.generate import llama
from benchfleet.generate.modelgen import mlp_onnx
from benchfleet.render import print_results
from benchfleet.stack import LocalStack
from common.procs import free_port
from common.wire.jobs import TERMINAL_STATES, JobResults, JobState

DEMO_JOB = """\
name: mlp-onnx-smoke
model: {ref: mlp-small:1}
backends: [onnxruntime]
batch_sizes: [1, 8]
load: {pattern: poisson, rate: 200, duration: 10s, warmup: 2s}
slo: {p99_ms: 20}
"""
DEMO_MODEL = ("mlp-small", "1")
# `demo --llm`: the highest rate vLLM (its CPU build) serves the canonical LLM at while 90% of requests get their
# first token within 1 s and each next within 200 ms: a goodput search, answered with its interval and probes. From
# 20 req/s: a probe holds 459 requests for its p99, so one at 10 req/s would take 50 s (one at 20 takes 25 s).
LLM_JOB = """\
name: llm-goodput-search
model: {ref: tiny-llama:1}
backends: [vllm]
load: {pattern: poisson, duration: 12s, warmup: 2s, search: {low: 20, high: 160, precision: 0.1, max_steps: 8}}
llm: {prompt_tokens: 48, output_tokens: 16}
slo: {ttft_ms: 1000, tpot_ms: 200, attainment: 0.9}
"""
LLM_MODEL = ("tiny-llama", "1")
FOLLOWER_ID = "local"


def _watch(client: BenchfleetClient, job_id: str, console: Console, timeout_s: float) -> JobResults:
    deadline = time.monotonic() + timeout_s
    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("points"),
        TimeElapsedColumn(),
        console=console,
        transient=False,
    ) as progress:
        job = client.job(job_id)
        bar = progress.add_task(f"{job.name}: {job.state}", total=job.points_total)
        while job.state not in TERMINAL_STATES:
            if time.monotonic() > deadline:
                raise TimeoutError(f"job {job_id} did not finish within {timeout_s:.0f}s (state {job.state})")
            time.sleep(0.5)
            job = client.job(job_id)
            progress.update(bar, completed=job.points_done, description=f"{job.name}: {job.state} (attempt {job.attempt})")
    return client.results(job_id)


def _upload_model(client: BenchfleetClient, llm: bool, console: Console) -> None:
    """The demo's model, generated here: the canonical MLP, or with `llm` the canonical LLM (a small Llama)."""
    if llm:
        made = llama(layers=2, hidden=128, heads=4, kv_heads=None, intermediate=None, vocab=2048, context=512, seed=5)
        name, version = LLM_MODEL
        meta = client.upload_model(made.data, name=name, version=version, format=made.format)
        console.print(f"generated and uploaded model {meta.ref}: {made.summary}")
        return
    name, version = DEMO_MODEL
    meta = client.upload_model(mlp_onnx(), name=name, version=version)
    console.print(f"generated and uploaded model {meta.ref} ({meta.size_bytes} bytes, sha256 {meta.sha256[:12]})")


def run_demo(
    *, job_yaml: str = DEMO_JOB, workdir: Path = Path(".benchfleet/demo"), console: Console | None = None, llm: bool = False
) -> int:
    """Start everything, run one benchmark, print its results, stop everything; returns the exit code. `llm`: a
    goodput search on vLLM instead, ending with the answer, its interval and its probes."""
    console = console or Console()
    if llm:  # the follower's own check, before anything starts: a fleet without vLLM would only wait for one
        from follower.backends.vllm import VllmBackend

        ok, why = VllmBackend.available()
        if not ok:
            console.print(f"demo --llm needs vLLM: {why}", markup=False, style="red")
            return 2
    shutil.rmtree(workdir, ignore_errors=True)
    # Running Redis or a database named in the environment are used as they are; the rest is started here.
    stack = LocalStack(
        workdir,
        mongo_uri=os.environ.get("BENCHFLEET_MONGO_URI"),
        redis_url=os.environ.get("BENCHFLEET_REDIS_URL"),
        # A free port, so a demo beside a running follower (default 9701) still exposes its metrics.
        env={"BENCHFLEET_FOLLOWER_METRICS_PORT": str(free_port())},
    )
    with stack:
        try:
            if stack.mongo_uri is None:
                stack.start_mongo()
            if stack.redis_url is None:
                stack.start_redis()
            console.print(f"[dim]work dir {workdir}; database, Redis, leader on {stack.url}, follower '{FOLLOWER_ID}'[/]")
            stack.start_leader()
            stack.start_follower(FOLLOWER_ID)
            with stack.client() as client:
                if not client.models():
                    _upload_model(client, llm, console)
                job = client.submit_yaml(job_yaml)
                most = job.estimate_max_s or job.estimate_s
                console.print(
                    f"submitted job {job.id} ({job.points_total} points, estimated {job.estimate_s:.0f}s, "
                    f"at most {most:.0f}s if the server falls behind)"
                )
                results = _watch(client, job.id, console, timeout_s=most * 2 + 120)
            print_results(console, results)
            for point in results.points:  # a search ends with its answer: what the team decides with
                if point.search is not None:
                    console.print(f"answer: {point.search.summary()}", markup=False, highlight=False, soft_wrap=True)
            if results.job.state != JobState.succeeded:
                console.print(f"[red]job {results.job.state}: {results.job.error}[/]")
                return 1
            return 0
        except (ApiError, RuntimeError, TimeoutError) as exc:
            console.print(f"[red]demo failed: {exc}[/]")
            for name, tail in stack.log_tails(20):
                console.print(f"[dim]--- {name} log tail ---[/]\n{tail}")
            return 1
        finally:
            console.print("[dim]stopping follower, leader, Redis and the database[/]")
