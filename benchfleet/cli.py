"""The `benchfleet` command: a thin layer over the Python client, plus `leader`, `follower` and `demo`."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Annotated

import httpx
import typer

from benchfleet.cli_common import (
    EXIT_CODES_HELP,
    EXIT_JOB_FAILED,
    EXIT_USAGE,
    TokenOpt,
    UrlOpt,
    call,
    client_for,
    console,
    err_console,
    fail,
)
from benchfleet.cli_repo import data_app, models_app
from benchfleet.client import EXPORT_FORMATS, ApiError, BenchfleetClient
from benchfleet.render import jobs_table, point_label, results_table, rows_table, simple_table
from common.jobs import TERMINAL_STATES, JobState, JobView
from common.results import PointResult

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Benchmark inference serving across a fleet of GPU hosts.",
                  epilog=EXIT_CODES_HELP)
app.add_typer(models_app, name="models")
app.add_typer(data_app, name="data")


def _parse_filters(filters: list[str] | None) -> list[str]:
    """Filter expressions (`backend=triton`, `p99<20`) go to the leader as given; an empty one is a usage error."""
    for item in filters or []:
        if not item.strip() or not any(op in item for op in ("=", ":", "<", ">")):
            fail(f"--filter: expected an expression such as backend=triton or p99<20, got {item!r}", EXIT_USAGE)
    return list(filters or [])


def _print_rows(data: object, *, as_json: bool, title: str) -> None:
    """A list of rows (or an object holding one) as a table, or the raw JSON."""
    if as_json:
        sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")
        return
    console.print(rows_table(data, title=title))


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


def watch_job(client: BenchfleetClient, job: JobView, *, poll_s: float = 0.5) -> JobView:
    """Show one progress bar per point until the job ends (a split job's parts side by side); returns the final job."""
    from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn

    from common.grid import expand

    points = expand(job.spec)
    per_point_s = job.spec.load.warmup + job.spec.load.max_run_s
    use_progress_api = True
    done: set[int] = set()
    running_since: dict[int, float] = {}
    with Progress(TextColumn("{task.description}"), BarColumn(), TaskProgressColumn(), TimeElapsedColumn(),
                  console=err_console, transient=False) as bars:
        header = bars.add_task(f"[bold]{job.name}[/] {job.state}", total=None)
        tasks = {p.index: bars.add_task(f"  point {p.index}: {point_label(p)}", total=100, start=False) for p in points}
        while True:
            job = call(client.job, job.id)
            # A split job's points_done is its parts' sum (the leader adds them up).
            split = f", {len(job.parts)} parts" if job.parts else ""
            bars.update(header, description=f"[bold]{job.name}[/] {job.state} ({job.points_done}/{job.points_total}{split})")
            if job.state not in (JobState.queued, JobState.assigned):
                finished = {r.point.index: r for r in call(client.results, job.id).points}
                for index in finished.keys() - done:
                    bars.start_task(tasks[index])
                    # The point's own figures, not its last live window's (which an overloaded point ends with 0 in).
                    bars.update(tasks[index], completed=100,
                                description=f"  point {index}: {point_label(points[index])}{finished_note(finished[index])}")
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
                    bars.update(tasks[current], completed=min(99.0, 100 * fraction),
                                description=f"  point {current}: {point_label(points[current])}{note}")
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
    with client_for(url, token) as client:
        job = call(client.submit_yaml, file.read_text())
        console.print(f"{job.id}")
        if not watch:
            return
        job = watch_job(client, job)
        console.print(results_table(call(client.results, job.id)))
        if job.state != JobState.succeeded:
            fail(f"job {job.id} {job.state}: {job.error or ''}", EXIT_JOB_FAILED)


@app.command()
def jobs(url: UrlOpt = "http://127.0.0.1:8700", token: TokenOpt = "", state: str | None = None, limit: int = 50) -> None:
    """List jobs, newest first."""
    with client_for(url, token) as client:
        console.print(jobs_table(call(client.jobs, state=state, limit=limit)))


@app.command("job")
def job_cmd(job_id: str, url: UrlOpt = "http://127.0.0.1:8700", token: TokenOpt = "") -> None:
    """Show one job as JSON."""
    with client_for(url, token) as client:
        console.print_json(call(client.job, job_id).model_dump_json())


@app.command()
def results(
    job_id: str,
    url: UrlOpt = "http://127.0.0.1:8700",
    token: TokenOpt = "",
    format: Annotated[str, typer.Option(help="table, json (the typed results), csv or parquet (the leader's export)")] = "table",
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Write to this file instead of stdout.")] = None,
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
        console.print(results_table(res))
    elif output is not None:
        output.write_bytes(data)
        err_console.print(f"wrote {len(data)} bytes to {output}", markup=False)
    else:
        sys.stdout.buffer.write(data)
        sys.stdout.flush()


@app.command()
def cancel(job_id: str, url: UrlOpt = "http://127.0.0.1:8700", token: TokenOpt = "") -> None:
    """Cancel a job that has not ended."""
    with client_for(url, token) as client:
        job = call(client.cancel, job_id)
    console.print(f"{job.id} {job.state}")


@app.command()
def followers(url: UrlOpt = "http://127.0.0.1:8700", token: TokenOpt = "") -> None:
    """List followers and their state."""
    with client_for(url, token) as client:
        rows = call(client.followers)
    console.print(simple_table(
        ("id", "state", "host", "cpus", "memory MiB", "GPUs", "backends", "last seen", "running"),
        ((f.info.follower_id, f.state, f.info.host, str(f.info.cpu_count), str(f.info.memory_mb),
          ", ".join(g.name for g in f.info.gpus) or "none", ",".join(f.info.backends), f.last_seen.strftime("%H:%M:%S"),
          f.running_job or "-") for f in rows),
    ))  # fmt: skip


@app.command()
def leaderboard(
    url: UrlOpt = "http://127.0.0.1:8700",
    token: TokenOpt = "",
    sort: Annotated[str | None, typer.Option(help="Column to sort by, e.g. p99 or throughput.")] = None,
    filter: Annotated[list[str] | None, typer.Option("--filter", help="backend=triton, p99<20 ...; repeatable.")] = None,
    limit: Annotated[int | None, typer.Option(min=1)] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the leader's JSON.")] = False,
) -> None:
    """The best configurations measured so far."""
    filters = _parse_filters(filter)
    with client_for(url, token) as client:
        rows = call(client.leaderboard, sort=sort, filters=filters, limit=limit)
    _print_rows(rows, as_json=as_json, title="leaderboard")


@app.command()
def recommend(
    url: UrlOpt = "http://127.0.0.1:8700",
    token: TokenOpt = "",
    p99_ms: Annotated[float | None, typer.Option("--p99-ms", min=0.0, help="The p99 latency SLO in ms.")] = None,
    filter: Annotated[list[str] | None, typer.Option("--filter", help="backend=triton, p99<20 ...; repeatable.")] = None,
    confident: Annotated[
        bool, typer.Option("--confident", help="Hold the SLO against the upper end of each p99's 95% CI.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the leader's JSON.")] = False,
) -> None:
    """The configurations serving the most samples/s that meet the SLO."""
    filters = _parse_filters(filter)
    with client_for(url, token) as client:
        answer = call(client.recommend, p99_ms=p99_ms, filters=filters, confident=confident)
    _print_rows(answer, as_json=as_json, title=f"recommendation (p99 <= {p99_ms:g} ms)" if p99_ms else "recommendation")


@app.command()
def compare(
    job_a: str,
    job_b: str,
    url: UrlOpt = "http://127.0.0.1:8700",
    token: TokenOpt = "",
    as_json: Annotated[bool, typer.Option("--json", help="Print the leader's JSON.")] = False,
) -> None:
    """Compare two jobs point by point."""
    with client_for(url, token) as client:
        answer = call(client.compare, job_a, job_b)
    _print_rows(answer, as_json=as_json, title=f"{job_a} vs {job_b}")


def main() -> None:
    """Entry point of the `benchfleet` script."""
    app()
