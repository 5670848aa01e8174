"""The embedded default: SecantusDB, Redis, a leader and one local follower on this machine, one real benchmark."""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import sys
import time
from contextlib import ExitStack
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from benchfleet.client import ApiError, BenchfleetClient
from benchfleet.render import results_table
from common.jobs import TERMINAL_STATES, JobResults, JobState
from common.modelgen import mlp_onnx
from common.procs import SupervisedProcess, free_port, http_ready

DEMO_JOB = """\
name: mlp-onnx-smoke
model: {ref: mlp-small:1}
backends: [onnxruntime]
batch_sizes: [1, 8]
load: {pattern: poisson, rate: 200, duration: 10s, warmup: 2s}
slo: {p99_ms: 20}
"""
DEMO_MODEL = ("mlp-small", "1")
FOLLOWER_ID = "local"


def _port_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


def _python_module(module: str) -> list[str]:
    return [sys.executable, "-m", module]


def _start_redis(stack: ExitStack, workdir: Path) -> str:
    binary = shutil.which("redis-server")
    if binary is None:
        raise RuntimeError("redis-server is not installed (apt-get install redis-server), or set BENCHFLEET_REDIS_URL")
    port = free_port()
    proc = SupervisedProcess(
        [binary, "--bind", "127.0.0.1", "--port", str(port), "--save", "", "--appendonly", "no", "--dir", str(workdir)],
        name="redis", log_path=workdir / "redis.log",
    )
    proc.start()
    stack.callback(proc.stop)
    proc.wait_ready(lambda: _port_open(port), timeout_s=20)
    return f"redis://127.0.0.1:{port}/0"


def _start_secantus(stack: ExitStack, workdir: Path) -> str:
    binary = shutil.which("secantusd-py") or str(Path(sys.executable).parent / "secantusd-py")
    if not os.path.exists(binary):
        raise RuntimeError("secantusd-py is not installed (pip install 'benchfleet[embedded]'), or set BENCHFLEET_MONGO_URI")
    port = free_port()
    # SecantusDB is GPL-2.0: it runs only as a separate process, never imported.
    proc = SupervisedProcess(
        [binary, "--host", "127.0.0.1", "--port", str(port), "--storage-path", str(workdir / "db"), "--standalone"],
        name="secantusdb", log_path=workdir / "secantusdb.log",
    )
    proc.start()
    stack.callback(proc.stop)
    proc.wait_ready(lambda: _port_open(port), timeout_s=60)
    return f"mongodb://127.0.0.1:{port}/?directConnection=true&retryWrites=false"


def _watch(client: BenchfleetClient, job_id: str, console: Console, timeout_s: float) -> JobResults:
    deadline = time.monotonic() + timeout_s
    with Progress(
        TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("points"), TimeElapsedColumn(),
        console=console, transient=False,
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


def run_demo(*, job_yaml: str = DEMO_JOB, workdir: Path = Path(".benchfleet/demo"), console: Console | None = None) -> int:
    """Start everything, run one benchmark, print its results, stop everything; returns the exit code."""
    console = console or Console()
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    admin_token, follower_token = secrets.token_urlsafe(24), secrets.token_urlsafe(24)
    procs: list[SupervisedProcess] = []
    with ExitStack() as stack:
        try:
            mongo_uri = os.environ.get("BENCHFLEET_MONGO_URI") or _start_secantus(stack, workdir)
            redis_url = os.environ.get("BENCHFLEET_REDIS_URL") or _start_redis(stack, workdir)
            port = free_port()
            leader_url = f"http://127.0.0.1:{port}"
            env = {
                **os.environ,
                "BENCHFLEET_MONGO_URI": mongo_uri,
                "BENCHFLEET_REDIS_URL": redis_url,
                "BENCHFLEET_LEADER_PORT": str(port),
                "BENCHFLEET_LEADER_ADMIN_TOKEN": admin_token,
                "BENCHFLEET_LEADER_FOLLOWER_TOKEN": follower_token,
                "BENCHFLEET_FOLLOWER_LEADER_URL": leader_url,
                "BENCHFLEET_FOLLOWER_TOKEN": follower_token,
                "BENCHFLEET_FOLLOWER_FOLLOWER_ID": FOLLOWER_ID,
                "BENCHFLEET_FOLLOWER_WORK_DIR": str(workdir / "follower"),
                # A free port, so a demo beside a running follower (default 9701) still exposes its metrics.
                "BENCHFLEET_FOLLOWER_METRICS_PORT": str(free_port()),
            }
            console.print(f"[dim]work dir {workdir}; database, Redis, leader on {leader_url}, follower '{FOLLOWER_ID}'[/]")
            leader = SupervisedProcess(_python_module("leader"), name="leader", log_path=workdir / "leader.log", env=env)
            procs.append(leader)
            leader.start()
            stack.callback(leader.stop)
            leader.wait_ready(http_ready(f"{leader_url}/healthz"), timeout_s=60)
            follower = SupervisedProcess(_python_module("follower"), name="follower", log_path=workdir / "follower.log", env=env)
            procs.append(follower)
            follower.start()
            stack.callback(follower.stop)
            client = stack.enter_context(BenchfleetClient(leader_url, admin_token))
            follower.wait_ready(lambda: any(f.info.follower_id == FOLLOWER_ID for f in client.followers()), timeout_s=60)
            if not client.models():
                name, version = DEMO_MODEL
                meta = client.upload_model(mlp_onnx(), name=name, version=version)
                console.print(f"generated and uploaded model {meta.ref} ({meta.size_bytes} bytes, sha256 {meta.sha256[:12]})")
            job = client.submit_yaml(job_yaml)
            console.print(f"submitted job {job.id} ({job.points_total} points, estimated {job.estimate_s:.0f}s)")
            results = _watch(client, job.id, console, timeout_s=job.estimate_s * 3 + 120)
            console.print(results_table(results))
            if results.job.state != JobState.succeeded:
                console.print(f"[red]job {results.job.state}: {results.job.error}[/]")
                return 1
            return 0
        except (ApiError, RuntimeError, TimeoutError) as exc:
            console.print(f"[red]demo failed: {exc}[/]")
            for proc in procs:
                console.print(f"[dim]--- {proc.name} log tail ---[/]\n{proc.log_tail(20)}")
            return 1
        finally:
            console.print("[dim]stopping follower, leader, Redis and the database…[/]")
