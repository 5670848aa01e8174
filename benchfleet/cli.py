"""The `benchfleet` command: a thin layer over the Python client, plus `leader`, `follower` and `demo`."""

from __future__ import annotations

import json
import logging
import sys
import time
from pathlib import Path
from typing import Annotated, NoReturn

import httpx
import typer
from rich.console import Console
from rich.table import Table

from benchfleet.client import ApiError, BenchfleetClient
from benchfleet.render import jobs_table, results_table
from common.jobs import TERMINAL_STATES, JobState

# Exit codes scripts can rely on.
EXIT_OK, EXIT_JOB_FAILED, EXIT_USAGE, EXIT_API, EXIT_UNREACHABLE = 0, 1, 2, 3, 4

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Benchmark inference serving across a fleet of GPU hosts.")
models_app = typer.Typer(no_args_is_help=True, help="The model repository.")
app.add_typer(models_app, name="models")
console = Console()
err_console = Console(stderr=True)

UrlOpt = Annotated[str, typer.Option("--url", envvar="BENCHFLEET_URL", help="Leader base URL.")]
TokenOpt = Annotated[str, typer.Option("--token", envvar="BENCHFLEET_TOKEN", help="API token.", show_default=False)]


def _fail(message: str, code: int) -> NoReturn:
    err_console.print(f"error: {message}", markup=False, highlight=False)
    raise typer.Exit(code)


def _client(url: str, token: str) -> BenchfleetClient:
    if not token:
        _fail("no API token: pass --token or set BENCHFLEET_TOKEN", EXIT_USAGE)
    return BenchfleetClient(url, token)


def _call(fn, *args, **kwargs):  # type: ignore[no-untyped-def]
    """Run a client call, turning API and connection errors into one line and an exit code."""
    try:
        return fn(*args, **kwargs)
    except ApiError as exc:
        _fail(str(exc), EXIT_API)
    except httpx.TransportError as exc:
        _fail(f"cannot reach the leader: {exc}", EXIT_UNREACHABLE)


@app.command()
def leader() -> None:
    """Run the leader (settings from BENCHFLEET_LEADER_* variables)."""
    from leader.__main__ import main as leader_main

    raise typer.Exit(leader_main())


@app.command()
def follower() -> None:
    """Run a follower agent (settings from BENCHFLEET_FOLLOWER_* variables)."""
    from follower.agent import run_agent
    from follower.settings import FollowerSettings

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    run_agent(FollowerSettings())  # type: ignore[call-arg]


@app.command()
def demo(
    job: Annotated[Path | None, typer.Option(help="A job YAML to run instead of the built-in example.")] = None,
    workdir: Annotated[Path, typer.Option(help="Where logs and data of this demo go.")] = Path(".benchfleet/demo"),
) -> None:
    """Start an embedded DB, Redis, a leader and a local follower; run one real benchmark; print the results."""
    from benchfleet.demo import DEMO_JOB, run_demo

    raise typer.Exit(run_demo(job_yaml=job.read_text() if job else DEMO_JOB, workdir=workdir, console=console))


@app.command()
def submit(
    file: Annotated[Path, typer.Argument(exists=True, dir_okay=False, readable=True, help="Job YAML.")],
    url: UrlOpt = "http://127.0.0.1:8700",
    token: TokenOpt = "",
    watch: Annotated[bool, typer.Option("--watch", help="Follow progress and print the results.")] = False,
) -> None:
    """Submit a job written in YAML."""
    with _client(url, token) as client:
        job = _call(client.submit_yaml, file.read_text())
        console.print(f"{job.id}")
        if not watch:
            return
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      console=err_console) as progress:
            bar = progress.add_task(f"{job.name}: {job.state}", total=job.points_total)
            while job.state not in TERMINAL_STATES:
                time.sleep(0.5)
                job = _call(client.job, job.id)
                progress.update(bar, completed=job.points_done, description=f"{job.name}: {job.state}")
        console.print(results_table(_call(client.results, job.id)))
        if job.state != JobState.succeeded:
            _fail(f"job {job.id} {job.state}: {job.error or ''}", EXIT_JOB_FAILED)


@app.command()
def jobs(url: UrlOpt = "http://127.0.0.1:8700", token: TokenOpt = "", state: str | None = None, limit: int = 50) -> None:
    """List jobs, newest first."""
    with _client(url, token) as client:
        console.print(jobs_table(_call(client.jobs, state=state, limit=limit)))


@app.command("job")
def job_cmd(job_id: str, url: UrlOpt = "http://127.0.0.1:8700", token: TokenOpt = "") -> None:
    """Show one job as JSON."""
    with _client(url, token) as client:
        console.print_json(_call(client.job, job_id).model_dump_json())


@app.command()
def results(
    job_id: str,
    url: UrlOpt = "http://127.0.0.1:8700",
    token: TokenOpt = "",
    format: Annotated[str, typer.Option(help="table or json")] = "table",
) -> None:
    """Show a job's results."""
    with _client(url, token) as client:
        res = _call(client.results, job_id)
    if format == "json":
        sys.stdout.write(res.model_dump_json(indent=2) + "\n")
    elif format == "table":
        console.print(results_table(res))
    else:
        _fail(f"--format: unknown format {format!r} (table, json)", EXIT_USAGE)


@app.command()
def cancel(job_id: str, url: UrlOpt = "http://127.0.0.1:8700", token: TokenOpt = "") -> None:
    """Cancel a job that has not ended."""
    with _client(url, token) as client:
        job = _call(client.cancel, job_id)
    console.print(f"{job.id} {job.state}")


@app.command()
def followers(url: UrlOpt = "http://127.0.0.1:8700", token: TokenOpt = "") -> None:
    """List followers and their state."""
    with _client(url, token) as client:
        rows = _call(client.followers)
    table = Table()
    for column in ("id", "state", "host", "cpus", "memory MiB", "GPUs", "backends", "last seen", "running"):
        table.add_column(column)
    for f in rows:
        gpus = ", ".join(g.name for g in f.info.gpus) or "none"
        table.add_row(f.info.follower_id, f.state, f.info.host, str(f.info.cpu_count), str(f.info.memory_mb), gpus,
                      ",".join(f.info.backends), f.last_seen.strftime("%H:%M:%S"), f.running_job or "-")
    console.print(table)


@models_app.command("push")
def models_push(
    file: Annotated[Path, typer.Argument(exists=True, dir_okay=False, readable=True)],
    name: Annotated[str, typer.Option()],
    version: Annotated[str, typer.Option()],
    format: str = "onnx",
    url: UrlOpt = "http://127.0.0.1:8700",
    token: TokenOpt = "",
) -> None:
    """Upload a model file."""
    with _client(url, token) as client:
        meta = _call(client.upload_model, file, name=name, version=version, format=format)
    console.print(f"{meta.ref} sha256={meta.sha256} size={meta.size_bytes}")


@models_app.command("ls")
def models_ls(url: UrlOpt = "http://127.0.0.1:8700", token: TokenOpt = "") -> None:
    """List models."""
    with _client(url, token) as client:
        rows = _call(client.models)
    table = Table()
    for column in ("name", "version", "format", "inputs", "outputs", "size", "sha256"):
        table.add_column(column)
    for m in rows:
        sig = lambda ts: ", ".join(f"{t.name}:{t.datatype}{t.shape}" for t in ts)  # noqa: E731
        table.add_row(m.name, m.version, m.format, sig(m.inputs), sig(m.outputs), str(m.size_bytes), m.sha256[:12])
    console.print(table)


@models_app.command("rm")
def models_rm(name: str, version: str, url: UrlOpt = "http://127.0.0.1:8700", token: TokenOpt = "") -> None:
    """Delete a model version."""
    with _client(url, token) as client:
        _call(client.delete_model, name, version)
    console.print(json.dumps({"deleted": f"{name}:{version}"}))


def main() -> None:
    """Entry point of the `benchfleet` script."""
    app()
