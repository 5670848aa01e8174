"""The `benchfleet` command: a thin layer over the Python client, plus `leader`, `follower` and `demo`."""

from __future__ import annotations

import sys
import time
from importlib.metadata import version as package_version
from pathlib import Path
from typing import Annotated

import httpx
import typer
from rich.console import Console
from rich.markup import escape

from benchfleet import cli_admin, cli_analysis, cli_imports, cli_store, cli_teams
from benchfleet.calls import EXPORT_FORMATS
from benchfleet.cli_common import (
    DEFAULT_PORT,
    DEFAULT_URL,
    EXIT_CODES_HELP,
    EXIT_JOB_FAILED,
    EXIT_UNREACHABLE,
    EXIT_USAGE,
    JsonOpt,
    TokenOpt,
    UrlOpt,
    WideOpt,
    call,
    client_for,
    console,
    err_console,
    fail,
    show,
)
from benchfleet.cli_repo import data_app, models_app
from benchfleet.client import ApiError, BenchfleetClient
from benchfleet.render import footprint_sheet, jobs_sheet, point_label, print_results
from common.wire.jobs import TERMINAL_STATES, JobState, JobView, as_ran
from common.wire.results import PointResult

app = typer.Typer(no_args_is_help=True, help="Benchmark inference serving across a fleet of GPU hosts.", epilog=EXIT_CODES_HELP)


def _version(value: bool) -> None:
    if value:
        console.print(f"benchfleet {package_version('benchfleet')}", markup=False, highlight=False)
        raise typer.Exit()


@app.callback()
def _options(
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version.")] = False,
) -> None:
    """Benchmark inference serving across a fleet of GPU hosts."""


def _live_fraction(progress: dict | None, index: int, *, warmup_s: float, run_s: float) -> tuple[float, str] | None:
    """The running point's done fraction and its latest window (p99, throughput) from the leader's live progress."""
    if not isinstance(progress, dict):
        return None
    for entry in progress.get("points", []):
        windows = entry.get("windows") if isinstance(entry, dict) and entry.get("index") == index else None
        if windows:
            last = windows[-1]
            elapsed = warmup_s + float(last.get("t_s", 0.0)) + float(last.get("duration_s", 0.0))
            p99 = last.get("p99_ms")
            note = f" · {last.get('throughput', 0):.0f} req/s" + (f" · p99 {p99:.1f} ms" if p99 is not None else "")
            if last.get("tokens_per_s") is not None:  # a language model's window: its token rate and TTFT
                ttft = last.get("ttft_p99_ms")
                note += f" · {last['tokens_per_s']:.0f} tokens/s" + (f" · TTFT p99 {ttft:.1f} ms" if ttft is not None else "")
            return elapsed / (warmup_s + run_s), note
    return None


def finished_note(result: PointResult) -> str:
    """A finished point's figures for its progress line: what it delivered, its p99 and whether it is valid."""
    p99 = f" · p99 {result.latency_ms.p99:.1f} ms" if result.latency_ms is not None else ""
    verdict = "" if result.valid else " · invalid: " + ", ".join(r.code for r in result.reasons)
    return f" · {result.achieved_rate:.0f} req/s{p99}{verdict}"


def running_points(client: BenchfleetClient, job: JobView, done: set[int], pending: list[int]) -> list[tuple[int, str, int]]:
    """The points running now as (index in the job's grid, job id whose live progress has it, index there).

    A plain job runs its first pending point. A split job runs one point per running part, each part its own job
    numbered from 0 (part_start maps it back into the split job's grid).
    """
    if not job.parts:
        return [(pending[0], job.id, pending[0])] if pending else []
    out = []
    for part_id in job.parts:
        part = call(client.job, part_id)
        if part.state != JobState.running or part.part_start is None:
            continue
        start = part.part_start
        first = next((i for i in range(start, start + part.points_total) if i not in done), None)
        if first is not None:
            out.append((first, part.id, first - start))
    return out


# The width of progress lines written to a log (not a terminal): wide enough for a point's label and its figures.
LOG_WIDTH = 240


def _progress_console() -> Console:
    """Where the bars go: the terminal as it is, or (a log) a console wide enough that no point's line is cut."""
    return err_console if err_console.is_terminal else Console(stderr=True, width=LOG_WIDTH, highlight=False)


# The states in which a job waits for a follower, with the leader's reason why (JobView.waiting_reason).
WAITING = (JobState.queued, JobState.assigned)


def watch_job(client: BenchfleetClient, job: JobView, *, poll_s: float = 0.5) -> JobView:
    """Show one progress bar per point until the job ends (a split job's parts side by side); returns the final job."""
    from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn

    from common.spec.grid import expand

    points = expand(job.spec)
    per_point_s = job.spec.load.warmup + job.spec.load.max_run_s
    use_progress_api = True
    done: set[int] = set()
    running_since: dict[int, float] = {}
    said: str | None = None  # the waiting reason last printed
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TaskProgressColumn(),
        TimeElapsedColumn(),
        console=_progress_console(),
        transient=False,
    ) as bars:
        header = bars.add_task(f"[bold]{job.name}[/] {job.state}", total=None)
        tasks = {p.index: bars.add_task(f"  point {p.index}: {point_label(p)}", total=100, start=False) for p in points}
        while True:
            job = call(client.job, job.id)
            # A split job's points_done is its parts' sum (the leader adds them up).
            split = f", {len(job.parts)} parts" if job.parts else ""
            reason = job.waiting_reason if job.state in WAITING else None
            if reason and reason != said:  # a line of its own too, so a log (where bars are drawn at the end) has it
                bars.console.print(f"{job.name} {job.state}: {reason}", markup=False, highlight=False)
            said = reason
            waiting = f" — {escape(reason)}" if reason else ""
            bars.update(
                header, description=f"[bold]{job.name}[/] {job.state} ({job.points_done}/{job.points_total}{split}){waiting}"
            )
            if job.state not in WAITING:
                finished = {r.point.index: r for r in call(client.results, job.id).points}
                for index in finished.keys() - done:
                    bars.start_task(tasks[index])
                    # The point's own figures, not its last live window's (which an overloaded point ends with 0 in).
                    bars.update(
                        tasks[index],
                        completed=100,
                        description=f"  point {index}: {point_label(points[index])}{finished_note(finished[index])}",
                    )
                done |= finished.keys()
                pending = [p.index for p in points if p.index not in done]
                current_points = running_points(client, job, done, pending) if job.state == JobState.running else []
                for current, source, local in current_points:
                    live = None
                    if use_progress_api:
                        try:
                            live = client.progress(source)
                        except (ApiError, httpx.TransportError, ValueError):
                            use_progress_api = False  # older leader without live progress: fall back to elapsed time
                    if current not in running_since:
                        running_since[current] = time.monotonic()
                        bars.start_task(tasks[current])
                    live_point = _live_fraction(live, local, warmup_s=job.spec.load.warmup, run_s=job.spec.load.max_run_s)
                    if live_point is not None:
                        fraction, note = live_point
                    else:  # estimate from elapsed time; capped so it never claims a finished point
                        fraction, note = (time.monotonic() - running_since[current]) / per_point_s, ""
                    bars.update(
                        tasks[current],
                        completed=min(99.0, 100 * fraction),
                        description=f"  point {current}: {point_label(points[current])}{note}",
                    )
            if job.state in TERMINAL_STATES:
                return job
            time.sleep(poll_s)


@app.command()
def leader() -> None:
    """Run the leader (settings from BENCHFLEET_LEADER_* variables)."""
    from leader.__main__ import main as leader_main

    raise typer.Exit(leader_main())


@app.command()
def follower() -> None:
    """Run a follower agent (settings from BENCHFLEET_FOLLOWER_* variables)."""
    from follower.__main__ import main as follower_main

    raise typer.Exit(follower_main())


@app.command()
def demo(
    job: Annotated[Path | None, typer.Option(help="A job YAML to run instead of the built-in example.")] = None,
    workdir: Annotated[Path, typer.Option(help="Where logs and data of this demo go.")] = Path(".benchfleet/demo"),
    llm: Annotated[
        bool, typer.Option("--llm", help="A goodput search on vLLM (its CPU build) serving the canonical LLM instead.")
    ] = False,
) -> None:
    """Start an embedded DB, Redis, a leader and a local follower; run one real benchmark; print the results."""
    from benchfleet.demo import DEMO_JOB, LLM_JOB, run_demo

    default = LLM_JOB if llm else DEMO_JOB
    raise typer.Exit(run_demo(job_yaml=job.read_text() if job else default, workdir=workdir, console=console, llm=llm))


FleetDirOpt = Annotated[Path, typer.Option("--workdir", help="Where the local fleet keeps its data, logs and token.")]


@app.command()
def up(
    workdir: FleetDirOpt = Path(".benchfleet/fleet"),
    port: Annotated[int, typer.Option(help="The leader's port.")] = DEFAULT_PORT,
) -> None:
    """Start a local fleet that stays up (the embedded database, Redis, a leader, one follower) until `down`."""
    from benchfleet import up as local_fleet

    try:
        state = local_fleet.up(workdir, port)
    except local_fleet.PortTaken as exc:
        fail(str(exc), EXIT_USAGE)
    except RuntimeError as exc:
        fail(str(exc), EXIT_UNREACHABLE)
    token_file = (workdir / local_fleet.TOKEN).resolve()
    console.print(f"fleet up: leader {state['url']}, follower {local_fleet.FOLLOWER_ID!r}, data in {workdir}", markup=False)
    console.print(
        f"export BENCHFLEET_URL={state['url']} BENCHFLEET_TOKEN=$(cat {token_file})  # the admin token",
        markup=False,
        highlight=False,
        soft_wrap=True,
    )


@app.command()
def down(workdir: FleetDirOpt = Path(".benchfleet/fleet")) -> None:
    """Stop the local fleet `up` started (its data stays for the next `up`)."""
    from benchfleet import up as local_fleet

    try:
        stopped = local_fleet.down(workdir)
    except RuntimeError as exc:
        fail(str(exc), EXIT_UNREACHABLE)
    console.print("fleet stopped" if stopped else f"no fleet running from {workdir}", markup=False)


@app.command()
def submit(
    file: Annotated[Path, typer.Argument(exists=True, dir_okay=False, readable=True, help="Job YAML.")],
    url: UrlOpt = DEFAULT_URL,
    token: TokenOpt = "",
    watch: Annotated[bool, typer.Option("--watch", help="Follow progress and print the results.")] = False,
) -> None:
    """Submit a job written in YAML."""
    with client_for(url, token) as client:
        _submitted(client, call(client.submit_yaml, file.read_text()), watch)


def _submitted(client: BenchfleetClient, job: JobView, watch: bool) -> None:
    """Print a submitted job's id (and, on stderr, why no follower can run it now, where none can); with `watch`,
    follow it and print its results (exit code: its outcome)."""
    console.print(f"{job.id}")
    if job.waiting_reason and not watch:  # (watching prints it as it changes)
        err_console.print(f"{job.name} queued: {job.waiting_reason}", markup=False, highlight=False)
    if not watch:
        return
    job = watch_job(client, job)
    print_results(console, call(client.results, job.id))
    if job.state != JobState.succeeded:
        fail(f"job {job.id} {job.state}: {job.error or ''}", EXIT_JOB_FAILED)


@app.command()
def jobs(
    url: UrlOpt = DEFAULT_URL,
    token: TokenOpt = "",
    state: str | None = None,
    limit: int = 50,
    as_json: JsonOpt = False,
    wide: WideOpt = False,
) -> None:
    """List jobs, newest first."""
    with client_for(url, token) as client:
        rows = call(client.jobs, state=state, limit=limit)
    show(rows, jobs_sheet, as_json=as_json, wide=wide)


@app.command("job")
def job_cmd(job_id: str, url: UrlOpt = DEFAULT_URL, token: TokenOpt = "") -> None:
    """Show one job as JSON (and, while it waits for a follower, why: on stderr, as `submit` says it)."""
    with client_for(url, token) as client:
        job = call(client.job, job_id)
    console.print_json(job.model_dump_json())
    if job.waiting_reason and job.state in WAITING:
        err_console.print(f"{job.name} {job.state.value}: {job.waiting_reason}", markup=False, highlight=False, soft_wrap=True)


@app.command()
def results(
    job_id: str,
    url: UrlOpt = DEFAULT_URL,
    token: TokenOpt = "",
    format: Annotated[
        str,
        typer.Option(
            help="table, json (the typed results), csv or parquet (the leader's export), llm-d or mlperf (their reports)"
        ),
    ] = "table",
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Write to this file instead of stdout.")] = None,
    wide: WideOpt = False,
) -> None:
    """Show or export a job's results."""
    if format not in ("table", *EXPORT_FORMATS):
        fail(f"--format: unknown format {format!r} (table, {', '.join(EXPORT_FORMATS)})", EXIT_USAGE)
    if format == "parquet" and output is None and sys.stdout.isatty():
        fail("--format parquet is binary: pass --output FILE or redirect stdout", EXIT_USAGE)
    with client_for(url, token) as client:
        if format in ("table", "json"):
            res = call(client.results, job_id)
            data = res.model_dump_json(indent=2).encode() + b"\n"
        else:
            data = call(client.export, job_id, format)
    if format == "table":
        print_results(console, res, wide=wide)
    elif output is not None:
        output.write_bytes(data)
        err_console.print(f"wrote {len(data)} bytes to {output}", markup=False)
    else:
        sys.stdout.buffer.write(data)
        sys.stdout.flush()


@app.command()
def cancel(job_id: str, url: UrlOpt = DEFAULT_URL, token: TokenOpt = "") -> None:
    """Cancel a job that has not ended."""
    with client_for(url, token) as client:
        job = call(client.cancel, job_id)
    console.print(f"{job.id} {job.state}")


@app.command()
def delete(
    job_id: str,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Show what would be removed; remove nothing.")] = False,
    as_json: JsonOpt = False,
    url: UrlOpt = DEFAULT_URL,
    token: TokenOpt = "",
) -> None:
    """Delete a finished job and all its data (results, leaderboard rows, raw records, progress, shard records)."""
    with client_for(url, token) as client:
        gone = call(client.footprint if dry_run else client.delete_job, job_id)
    show(gone, footprint_sheet, as_json=as_json)


@app.command()
def rerun(
    job_id: str,
    url: UrlOpt = DEFAULT_URL,
    token: TokenOpt = "",
    watch: Annotated[bool, typer.Option("--watch", help="Follow progress and print the results.")] = False,
) -> None:
    """Submit a job again exactly as it ran: its spec, the model version it ran (not the latest), the same seed."""
    with client_for(url, token) as client:
        old = call(client.job, job_id)
        try:
            spec = as_ran(old)
        except ValueError as exc:
            fail(str(exc), EXIT_USAGE)
        _submitted(client, call(client.submit, spec), watch)


# After the job commands, in the order `--help` lists them: the repository, analysis, the fleet and its tokens.
app.add_typer(models_app, name="models")
app.add_typer(data_app, name="data")
cli_analysis.register(app)
cli_admin.register(app)
cli_teams.register(app)
cli_store.register(app)
cli_imports.register(app)


def main() -> None:
    """Entry point of the `benchfleet` script."""
    app()
