"""Rich tables of jobs and results, shared by the CLI and the demo."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table

from common.jobs import JobResults, JobView
from common.results import Percentiles
from common.spec import PointSpec


def _ms(p: Percentiles | None, attr: str) -> str:
    return f"{getattr(p, attr):.2f}" if p is not None else "-"


def results_table(results: JobResults) -> RenderableType:
    """One row per benchmark point: load, latency from the intended time, service time, send lag, verdict; then, for
    a job with repeats, one row per configuration: its runs' spread and the verdict on it."""
    job = results.job
    table = Table(title=f"job {job.id} · {job.name} · {job.model_ref} · {job.state}", title_justify="left")
    for column in ("#", "backend", "batch", "load", "achieved/s", "req", "err", "p50 ms", "p90", "p99", "p99.9", "max",
                   "svc p99", "lag p99", "cold s", "SLO", "valid"):
        table.add_column(column, justify="right" if column not in {"backend", "valid", "SLO"} else "left")
    for r in results.points:
        slo = "-" if r.slo_met is None else ("met" if r.slo_met else "missed")
        cold = f"{r.cold_start.to_first_answer_s:.2f}" if r.cold_start else "-"
        verdict = "yes" if r.valid else "NO: " + "; ".join(r.invalid_reasons)
        table.add_row(
            str(r.point.index), r.point.backend, str(r.point.batch_size), r.point.load_label(), f"{r.achieved_rate:.1f}",
            str(r.requests), str(r.errors), _ms(r.latency_ms, "p50"), _ms(r.latency_ms, "p90"), _ms(r.latency_ms, "p99"),
            _ms(r.latency_ms, "p999"), _ms(r.latency_ms, "max"), _ms(r.service_ms, "p99"), _ms(r.send_lag_ms, "p99"),
            cold, slo, verdict,
        )
    extra = [t for t in (llm_table(results), repeats_table(results) if results.repeats else None) if t is not None]
    return Group(table, *extra) if extra else table


def llm_table(results: JobResults) -> Table | None:
    """Per language-model point: time to first token (from the intended time, and from the send), inter-token
    latency, time per output token, token throughput, goodput and the token counts; None for a tensor model's job."""
    points = [r for r in results.points if r.llm is not None]
    if not points:
        return None
    table = Table(title="language model: latencies in ms (from the intended time; 'sent': from the send)", title_justify="left")
    for column in ("#", "load", "TTFT p50", "TTFT p99", "sent p99", "ITL p50", "ITL p99", "TPOT p50", "out tok/s",
                   "goodput/s", "tokens asked/server/client"):
        table.add_column(column, justify="right")
    for r in points:
        llm = r.llm
        assert llm is not None
        goodput = f"{llm.goodput_rps:.2f}" if llm.goodput_rps is not None else "-"
        table.add_row(
            str(r.point.index), r.point.load_label(), _ms(llm.ttft_ms, "p50"), _ms(llm.ttft_ms, "p99"),
            _ms(llm.ttft_sent_ms, "p99"), _ms(llm.itl_ms, "p50"), _ms(llm.itl_ms, "p99"), _ms(llm.tpot_ms, "p50"),
            f"{llm.output_tokens_per_s:.1f}", goodput,
            f"{llm.output_tokens_asked}/{llm.output_tokens_server}/{llm.output_tokens_client}",
        )  # fmt: skip
    return table


def _pct(value: float | None) -> str:
    return f"{100 * value:.1f}%" if value is not None else "-"


def repeats_table(results: JobResults) -> Table:
    """Per configuration run more than once: its runs' p99s, the spread (CV) of p50, p99 and req/s, the verdict."""
    table = Table(title="repeats: spread across runs (CV flagged above 5%) against each run's 95% CI", title_justify="left")
    for column in ("backend", "batch", "load", "runs", "p99 ms per run", "p50 CV", "p99 CV", "req/s CV", "verdict"):
        table.add_column(column, justify="left" if column in {"backend", "verdict", "p99 ms per run"} else "right")
    for r in results.repeats:
        p50, p99, throughput = r.metrics
        runs = f"{len(r.runs)}" + (f" ({len(r.invalid_runs)} invalid)" if r.invalid_runs else "")
        table.add_row(
            r.backend, str(r.batch_size), r.load, runs, ", ".join(f"{v:.2f}" if v is not None else "-" for v in p99.values),
            *(_pct(m.cv) + ("!" if m.cv_flagged else "") for m in (p50, p99, throughput)),
            f"{r.verdict.replace('_', ' ')}: {r.text}",
        )
    return table


def simple_table(columns: Sequence[str], rows: Iterable[Sequence[str]]) -> Table:
    """A plain table of text cells under the given column names."""
    table = Table()
    for column in columns:
        table.add_column(column)
    for row in rows:
        table.add_row(*row)
    return table


def jobs_table(jobs: list[JobView]) -> Table:
    """One row per job."""
    return simple_table(
        ("id", "name", "model", "state", "attempt", "follower", "points", "created"),
        ((job.id, job.name, job.model_ref, job.state, str(job.attempt), job.follower_id or "-",
          f"{job.points_done}/{job.points_total}", job.created_at.strftime("%Y-%m-%d %H:%M:%S")) for job in jobs),
    )  # fmt: skip


def point_label(point: PointSpec) -> str:
    """A short name of a point: backend, batch and load."""
    return f"{point.backend} b{point.batch_size} @ {point.load_label()}"


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, dict | list):
        return ", ".join(f"{k}={_cell(v)}" for k, v in value.items()) if isinstance(value, dict) else ", ".join(map(_cell, value))
    return "-" if value is None else str(value)


def rows_table(data: Any, *, title: str = "") -> Table:
    """A table of JSON rows: a list of objects, an object holding one list of objects, or one object (key, value)."""
    rows: Any = data
    if isinstance(data, dict):
        lists = [v for v in data.values() if isinstance(v, list) and all(isinstance(x, dict) for x in v)]
        rows = lists[0] if len(lists) == 1 else None
        if rows is None:  # one object: two columns
            table = Table(title=title, title_justify="left")
            table.add_column("field")
            table.add_column("value")
            for key, value in data.items():
                table.add_row(str(key), _cell(value))
            return table
    table = Table(title=title, title_justify="left")
    columns: list[str] = []
    for row in rows or []:
        for key in row if isinstance(row, dict) else []:
            if key not in columns:
                columns.append(key)
    for column in columns:
        table.add_column(column)
    for row in rows or []:
        table.add_row(*(_cell(row.get(c)) if isinstance(row, dict) else _cell(row) for c in columns))
    return table
