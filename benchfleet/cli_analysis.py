"""The analysis commands: leaderboard, recommend, compare (exit 5 on a regression, for CI gates), baseline, report."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer
from pydantic import ValidationError

from benchfleet.cli_common import (
    DEFAULT_URL,
    EXIT_NOT_COMPARABLE,
    EXIT_REGRESSION,
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
    print_json,
    show,
)
from benchfleet.tables import Col, Sheet
from common.errors import field_errors
from common.wire.analysis import CompareResponse, LeaderboardPage, RecommendQuery, RecommendResponse

FilterOpt = Annotated[list[str] | None, typer.Option("--filter", help="backend=triton, p99<20 ...; repeatable.")]


def _parse_filters(filters: list[str] | None) -> list[str]:
    """Filter expressions (`backend=triton`, `p99<20`) go to the leader as given; an empty one is a usage error."""
    for item in filters or []:
        if not item.strip() or not any(op in item for op in ("=", ":", "<", ">")):
            fail(f"--filter: expected an expression such as backend=triton or p99<20, got {item!r}", EXIT_USAGE)
    return list(filters or [])


def _num(value: float | None, spec: str = ".2f") -> str:
    return "-" if value is None else format(value, spec)


def leaderboard_sheet(page: LeaderboardPage) -> Sheet:
    """The rows that matter to a reader, the best under SLO starred; a language model's columns when it has any."""
    llm = any(r.ttft_p99_ms is not None for r in page.rows)
    text = {"right": False}
    cols = [
        Col("", **text),
        Col("model", **text),
        Col("backend", **text),
        Col("hardware", **text, rank=4),
        Col("batch"),
        Col("load"),
        Col("p50 ms", rank=2),
        Col("p99 ms"),
        Col("req/s", rank=1),
        Col("samples/s", rank=3),
        Col("valid", **text, rank=1),
        Col("cost/1M $", rank=5),
        Col("Wh/1M", rank=6),
    ]
    if llm:
        cols += [Col("TTFT p99", rank=1), Col("tokens/s", rank=2)]
    cols.append(Col("point", right=False, rank=3))
    sheet = Sheet(columns=cols, title="leaderboard")
    for r in page.rows:
        row = [
            "*" if r.best else "",
            r.model,
            r.backend,
            r.hardware,
            str(r.batch_size),
            r.load,
            _num(r.p50_ms),
            _num(r.p99_ms),
            _num(r.throughput, ".1f"),
            _num(r.samples_per_s, ".1f"),
            "yes" if r.valid else "no",
            _num(r.cost_usd_per_1m, ".3g"),
            _num(r.energy_wh_per_1m, ".3g"),
        ]
        if llm:
            row += [_num(r.ttft_p99_ms), _num(r.tokens_per_s, ".1f")]
        sheet.rows.append([*row, f"{r.job_id}:{r.index}"])
    shown = f"rows {page.offset + 1}-{page.offset + len(page.rows)}" if page.rows else "no rows"
    sheet.footer = (
        f"{shown} of {'' if page.total_exact else 'at least '}{page.total}, sorted by {page.sort} {page.order}; * the "
        "best valid point of its model under its SLO (most samples/s)"
    )
    return sheet


def _percent_in(value: float | None, low: float | None, high: float | None) -> str:
    """A share with its interval, as percent ("98.3% [97.0, 99.1]"); "-" when not measured."""
    if value is None or low is None or high is None:
        return "-"
    return f"{100 * value:.1f}% [{100 * low:.1f}, {100 * high:.1f}]"


def recommend_sheet(answer: RecommendResponse) -> Sheet:
    """One row per recommended configuration, with the point that backs it (a language model's: tokens/s, TTFT and
    TPOT p99, cost per 1M output tokens); with none, what to run as the note."""
    llm = answer.query.llm
    accuracy = answer.query.accuracy_floor() != "" or any(r.accuracy is not None for r in answer.recommendations)
    sheet = Sheet(
        title=f"recommendation: {answer.query.describe()}",
        columns=[
            Col("#"),
            Col("model", right=False, rank=2),
            Col("backend", right=False),
            Col("hardware", right=False, rank=3),
            Col("batch", rank=1),
            Col("load"),
            *(
                [Col("tok/s"), Col("TTFT p99"), Col("TPOT p99"), Col("$/1M tok", rank=4)]
                if llm
                else [Col("p99 ms"), Col("p99 CI high", rank=2), Col("req/s", rank=1), Col("samples/s"), Col("cost/1M $", rank=4)]
            ),
            *([Col("top-1 acc", right=False, rank=1)] if accuracy else []),
            Col("points", rank=5),
            Col("evidence", right=False, rank=2),
        ],
    )
    for r in answer.recommendations:
        figures = (
            [_num(r.tokens_per_s, ".1f"), _num(r.ttft_p99_ms), _num(r.tpot_p99_ms), _num(r.cost_usd_per_1m_tokens, ".3g")]
            if llm
            else [
                _num(r.p99_ms),
                _num(r.p99_ci_high_ms),
                _num(r.throughput, ".1f"),
                _num(r.samples_per_s, ".1f"),
                _num(r.cost_usd_per_1m, ".3g"),
            ]
        )
        backend = r.backend + (f" {r.options}" if r.options else "")
        if accuracy:
            figures.append(_percent_in(r.accuracy, r.accuracy_low, r.accuracy_high))
        row = [str(r.rank), r.model, backend, r.hardware, str(r.batch_size), r.evidence.load, *figures, str(r.candidates)]
        sheet.rows.append([*row, f"{r.evidence.job_id}:{r.evidence.index}"])
    if answer.missing:
        sheet.note(answer.missing)
    sheet.footer = f"{answer.considered} measured points met every constraint"
    return sheet


def compare_sheet(answer: CompareResponse) -> Sheet:
    """One row per point of B against the same point of A, with the change, its CI and the verdict."""
    sheet = Sheet(
        title=f"{answer.b} against {answer.a}",
        columns=[
            Col("point", right=False),
            Col("A p99 ms"),
            Col("B p99 ms"),
            Col("change"),
            Col("95% CI of B-A ms", rank=1),
            Col("p", rank=2),
            Col("test", right=False, rank=3),
            Col("verdict", right=False),
        ],
    )
    for p in answer.points:
        ci = f"{p.ci_low:+.2f} .. {p.ci_high:+.2f}" if p.ci_low is not None and p.ci_high is not None else "-"
        change = "-" if p.change is None else f"{100 * p.change:+.1f}%"
        verdict: str = p.verdict
        for name, valid, reasons, tool in (("A", p.a_valid, p.a_reasons, p.a_tool), ("B", p.b_valid, p.b_reasons, p.b_tool)):
            # The side's own verdict decides that nothing is judged here (an imported side has none: its notes say why).
            if valid is False and tool is None:
                verdict += " " + sheet.note(f"{p.key}: {name}'s point is invalid: {'; '.join(reasons)}")
        if p.comparable is not None and p.comparable != "comparable":
            verdict += " " + sheet.note(f"{p.key}: {p.comparable}")  # what differs between the two runs
        for line in p.definitions:  # a side another tool measured: its definitions, and what the recomputation moved
            verdict += " " + sheet.note(f"{p.key}: {line}")
        sheet.rows.append([p.key, _num(p.a_p99_ms), _num(p.b_p99_ms), change, ci, _num(p.p_value, ".3g"), p.test, verdict])
        for m in p.llm:  # a language model's figures, each under its point
            ci = f"{m.ci_low:+.2f} .. {m.ci_high:+.2f}" if m.ci_low is not None and m.ci_high is not None else "-"
            change = "-" if m.change is None else f"{100 * m.change:+.1f}%"
            test = "bootstrap" if m.ci_low is not None else "summary"
            sheet.rows.append([f"  {m.metric}", _num(m.a), _num(m.b), change, ci, "-", test, m.verdict])
        if (q := p.quality) is not None:  # top-1 accuracy in percent; its change and interval in points
            ci = f"{100 * q.ci_low:+.2f} .. {100 * q.ci_high:+.2f} pt"
            a, b = f"{100 * q.a:.1f}% of {q.a_samples}", f"{100 * q.b:.1f}% of {q.b_samples}"
            sheet.rows.append(["  top-1 accuracy", a, b, f"{100 * q.change:+.2f} pt", ci, "-", "newcombe", q.verdict])
    sheet.footer = f"{answer.regressions} regression(s) at a threshold of {100 * answer.threshold:g}%"
    if any(p.quality is not None for p in answer.points):
        sheet.footer += f" (top-1 accuracy: a fall of {100 * answer.quality_threshold:g} points)"
    if answer.invalid:
        sheet.footer += f"; {answer.invalid} point(s) not judged: a side's point is invalid"
    if answer.not_judged:
        sheet.footer += f"; {answer.not_judged} point(s) not judged: a side was imported (--include-imported judges it)"
    return sheet


def register(app: typer.Typer) -> None:
    """Add the analysis commands to the CLI."""

    @app.command()
    def leaderboard(
        url: UrlOpt = DEFAULT_URL,
        token: TokenOpt = "",
        sort: Annotated[str | None, typer.Option(help="Column to sort by, e.g. p99 or throughput.")] = None,
        order: Annotated[str | None, typer.Option(help="asc or desc.")] = None,
        filter: FilterOpt = None,  # noqa: A002 - the option's name
        limit: Annotated[int | None, typer.Option(min=1, help="Rows per page (the leader's default: 50).")] = None,
        offset: Annotated[int | None, typer.Option(min=0, help="Rows to skip.")] = None,
        as_json: JsonOpt = False,
        wide: WideOpt = False,
    ) -> None:
        """The measured points, best first by p99 (one page; --offset for the next)."""
        filters = _parse_filters(filter)
        with client_for(url, token) as client:
            page = call(client.leaderboard, sort=sort, filters=filters, limit=limit, order=order, offset=offset)
        show(page, leaderboard_sheet, as_json=as_json, wide=wide)

    @app.command()
    def recommend(
        url: UrlOpt = DEFAULT_URL,
        token: TokenOpt = "",
        p99_ms: Annotated[float | None, typer.Option("--p99-ms", help="The p99 latency SLO in ms.")] = None,
        ttft_ms: Annotated[float | None, typer.Option("--ttft-ms", help="A language model's TTFT p99 SLO in ms.")] = None,
        tpot_ms: Annotated[float | None, typer.Option("--tpot-ms", help="A language model's TPOT p99 SLO in ms.")] = None,
        min_rps: Annotated[float | None, typer.Option("--min-rps", help="Traffic to carry, in requests/s.")] = None,
        min_tokens: Annotated[float | None, typer.Option("--min-tokens-per-s", help="Traffic, in output tokens/s.")] = None,
        max_cost: Annotated[float | None, typer.Option("--max-cost", help="Budget per 1M requests.")] = None,
        max_cost_tokens: Annotated[
            float | None, typer.Option("--max-cost-per-1m-tokens", help="Budget per 1M output tokens.")
        ] = None,
        model: Annotated[str | None, typer.Option("--model", help="Only this model (name:version).")] = None,
        min_accuracy: Annotated[
            float | None, typer.Option("--min-accuracy", help="The least top-1 accuracy, 0..1 (points scored by quality:).")
        ] = None,
        max_drop: Annotated[
            float | None, typer.Option("--max-accuracy-drop", help="Within this much (0..1) of the model's most accurate.")
        ] = None,
        filter: FilterOpt = None,  # noqa: A002 - the option's name
        confident: Annotated[bool, typer.Option("--confident", help="Hold p99 and TTFT at the upper end of their CIs.")] = False,
        as_json: JsonOpt = False,
        wide: WideOpt = False,
    ) -> None:
        """The configurations serving the most (samples/s, or a language model's output tokens/s) that meet the SLO,
        the traffic and the budget; with none, what to run."""
        filters = _parse_filters(filter)
        try:
            query = RecommendQuery(
                p99_ms=p99_ms,
                ttft_ms=ttft_ms,
                tpot_ms=tpot_ms,
                min_throughput=min_rps,
                min_tokens_per_s=min_tokens,
                max_cost=max_cost,
                max_cost_per_1m_tokens=max_cost_tokens,
                model=model,
                min_accuracy=min_accuracy,
                max_accuracy_drop=max_drop,
                confident=confident,
            )
        except ValidationError as exc:
            first = field_errors(exc)[0]
            fail(f"{first['field'] or 'query'}: {first['message']}", EXIT_USAGE)
        with client_for(url, token) as client:
            answer = call(client.recommend, query, filters=filters)
        show(answer, recommend_sheet, as_json=as_json, wide=wide)

    @app.command()
    def compare(
        job_a: Annotated[str, typer.Argument(help="The reference: a job id or baseline:NAME.")],
        job_b: Annotated[str, typer.Argument(help="The job judged against it.")],
        url: UrlOpt = DEFAULT_URL,
        token: TokenOpt = "",
        threshold: Annotated[float | None, typer.Option(min=0.0, max=10.0, help="The p99 change that counts (0.05: 5%).")] = None,
        quality_threshold: Annotated[
            float | None, typer.Option(min=0.0, max=1.0, help="The fall in top-1 accuracy that counts (0.005: half a point).")
        ] = None,
        include_imported: Annotated[
            bool, typer.Option("--include-imported", help="Judge points another tool measured (an imported job) too.")
        ] = False,
        as_json: JsonOpt = False,
        wide: WideOpt = False,
    ) -> None:
        """Compare job B with job A point by point, latency between valid points only, accuracy wherever both scored it;
        exits 5 when a point regressed (a CI gate), else 6 when a point could not be judged because a side's point is
        invalid or, without --include-imported, was measured by another tool."""
        with client_for(url, token) as client:
            answer = call(
                client.compare,
                job_a,
                job_b,
                threshold=threshold,
                quality_threshold=quality_threshold,
                include_imported=include_imported,
            )
        show(answer, compare_sheet, as_json=as_json, wide=wide)
        if answer.regressions:
            raise typer.Exit(EXIT_REGRESSION)
        if answer.invalid or answer.not_judged:
            raise typer.Exit(EXIT_NOT_COMPARABLE)

    @app.command()
    def baseline(name: str, job_id: str, url: UrlOpt = DEFAULT_URL, token: TokenOpt = "", as_json: JsonOpt = False) -> None:
        """Pin a job as the team's named baseline (then: compare baseline:NAME JOB)."""
        with client_for(url, token) as client:
            pinned = call(client.pin_baseline, name, job_id)
        if as_json:
            print_json(pinned)
        else:
            console.print(f"baseline {name} is job {job_id}", markup=False)

    @app.command()
    def report(
        job_id: str,
        url: UrlOpt = DEFAULT_URL,
        token: TokenOpt = "",
        output: Annotated[Path | None, typer.Option("--output", "-o", help="Write to this file instead of stdout.")] = None,
    ) -> None:
        """The job's self-contained HTML report (opens offline)."""
        with client_for(url, token) as client:
            html = call(client.report, job_id)
        if output is None:
            sys.stdout.buffer.write(html)
            sys.stdout.flush()
        else:
            output.write_bytes(html)
            err_console.print(f"wrote {len(html)} bytes to {output}", markup=False)
