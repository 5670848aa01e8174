"""Sheets (benchfleet/tables.py) of jobs and results, shared by the CLI and the demo."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from rich.console import Console

from benchfleet.render_llm import llm_sheet, sessions_sheet
from benchfleet.render_llm import ms as _ms
from benchfleet.tables import Col, Sheet, print_sheet
from common.spec.job import PointSpec
from common.spec.sweep import label as sweep_label
from common.wire.imports import TOOL_NAMES
from common.wire.jobs import JobFootprint, JobResults, JobView
from common.wire.quality import Quality
from common.wire.remedies import REMEDY
from common.wire.results import PointResult


def results_sheets(results: JobResults) -> list[Sheet]:
    """The job's point table, then (a language model's job) its token table, then (with repeats) the runs' spread."""
    sheets = [points_sheet(results)]
    sheets += [search_sheet(r) for r in results.points if r.search is not None]
    if (llm := llm_sheet(results)) is not None:
        sheets.append(llm)
    sheets += [sessions_sheet(r) for r in results.points if r.llm is not None and r.llm.sessions is not None]
    if (wire := wire_sheet(results)) is not None:
        sheets.append(wire)
    if (quality := quality_sheet(results)) is not None:
        sheets.append(quality)
    if results.repeats:
        sheets.append(repeats_sheet(results))
    return sheets


def print_results(console: Console, results: JobResults, *, wide: bool = False) -> None:
    """Every sheet of a job's results (each shows the columns that fit; see benchfleet/tables.py)."""
    for sheet in results_sheets(results):
        print_sheet(console, sheet, wide=wide)


def points_sheet(results: JobResults) -> Sheet:
    """One row per benchmark point: load, latency from the intended time, service time, send lag, verdict (an invalid
    point's reasons are numbered notes under the table)."""
    job = results.job
    sheet = Sheet(
        title=f"job {job.id} · {job.name} · {job.model_ref} · {job.state}",
        columns=[
            Col("#"),
            Col("backend", right=False),
            Col("batch"),
            Col("load"),
            Col("req/s", rank=1),
            Col("req", rank=4),
            Col("err", rank=2),
            Col("p50 ms", rank=1),
            Col("p90", rank=4),
            Col("p99"),
            Col("p99.9", rank=3),
            Col("max", rank=5),
            Col("svc p99", rank=3),
            Col("lag p99", rank=4),
            Col("cold s", rank=5),
            Col("SLO", right=False),  # the verdict a user asked for: never the column a narrow terminal drops
            Col("valid", right=False),
        ],
    )
    names = [job.model_ref, *job.spec.colocate.models] if job.spec.colocate else []
    for r in results.points:
        slo = "-" if r.slo_met is None else ("met" if r.slo_met else "missed")
        backend: str = r.point.backend
        if names:  # a co-location job: which model the point measured, and beside which
            backend += f" {names[r.point.served]}" + "".join(f" beside {names[b]}" for b in r.point.beside)
        if job.spec.sweep:  # a sweep: the server configuration the point ran on
            backend += f" {sweep_label(job.spec.sweep, r.point.server)}"
        cold = f"{r.cold_start.to_first_answer_s:.2f}" if r.cold_start else "-"
        verdict = "yes" if r.valid else "NO " + sheet.note(f"point {r.point.index}: " + "; ".join(r.invalid_reasons))
        if r.imported is not None:  # another tool's run: no verdict of ours; what it fell behind, ours from its records
            verdict = "not judged " + sheet.note(f"point {r.point.index} ({r.imported.level}): " + imported_note(r))
        sheet.rows.append(
            [
                str(r.point.index),
                backend,
                str(r.point.batch_size),
                r.imported.level if r.imported else r.point.load_label(),
                f"{r.achieved_rate:.1f}",
                str(r.requests),
                str(r.errors),
                _ms(r.latency_ms, "p50"),
                _ms(r.latency_ms, "p90"),
                _ms(r.latency_ms, "p99"),
                _ms(r.latency_ms, "p999"),
                _ms(r.latency_ms, "max"),
                _ms(r.service_ms, "p99"),
                _ms(r.send_lag_ms, "p99"),
                cold,
                slo,
                verdict,
            ]
        )
    invalid = [r for r in results.points if not r.valid]
    for code in dict.fromkeys(reason.code for r in invalid for reason in r.reasons):  # each once, in the order met
        which = [str(r.point.index) for r in invalid if any(reason.code == code for reason in r.reasons)]
        sheet.note(f"what to change (point{'s' if len(which) > 1 else ''} {', '.join(which)}): {REMEDY[code]}")
    for backend, summary in sorted({(r.point.backend, r.conversion.summary()) for r in results.points if r.conversion}):
        sheet.note(f"{backend} served the model {summary}")
    sheet.footer = "latencies in ms from the intended send time; svc: from the actual send; lag: send delay"
    if job.imported is not None:
        defs = next(r.imported.definitions for r in results.points if r.imported is not None) if results.points else None
        sheet.footer = f"measured by {TOOL_NAMES[job.imported.tool]} {job.imported.version or ''} and imported".replace("  ", " ")
        sheet.footer += f"; its latency: {defs.latency}" if defs else ""
    return sheet


def imported_note(r: PointResult) -> str:
    """An imported point's account: where the tool fell behind, and benchfleet's own figures from its records."""
    assert r.imported is not None
    parts = [*r.imported.behind] or ["the file shows the tool kept its schedule"]
    if (mine := r.imported.recomputed) is not None:
        shifts = ", ".join(f"{k.removesuffix('_ms').replace('_', ' ')} {100 * v:+.1f}%" for k, v in mine.shift.items())
        parts.append(
            f"benchfleet's own from its {mine.requests} records (from {mine.counted_from}): latency p99 "
            f"{mine.latency_p99_ms:.3f} ms; against the tool's: {shifts or 'nothing to set beside'}"
        )
    return "; ".join(parts)


def wire_sheet(results: JobResults) -> Sheet | None:
    """A job with `audit: wire`: per point and figure, the client's p50 and p99 beside the wire's, the errors, and the
    send overhead; a point not audited says why. None for a job without the audit."""
    points = [r for r in results.points if r.wire is not None]
    if not points:
        return None
    sheet = Sheet(
        title="wire audit: the client's figures (ms) against the kernel's packet timestamps",
        columns=[
            Col("#"),
            Col("figure", right=False),
            Col("n", rank=2),
            Col("client p50"),
            Col("wire p50"),
            Col("err p50"),
            Col("client p99"),
            Col("wire p99"),
            Col("err p99"),
            Col("send µs p50/p99", rank=1),
        ],
    )
    for r in points:
        wire = r.wire
        assert wire is not None
        if not wire.ran:
            sheet.rows.append([str(r.point.index), "not audited " + sheet.note(wire.why_not or "")] + ["-"] * 8)
            continue
        send = f"{wire.send_us.p50:.0f}/{wire.send_us.p99:.0f}" if wire.send_us else "-"
        for f in wire.figures:
            errors = [f.error("p50"), f.error("p99")]
            p50, p99 = (f"{100 * e:+.2f}%" if e is not None else "-" for e in errors)
            row = [f"{f.client_p50:.3f}", f"{f.wire_p50:.3f}", p50, f"{f.client_p99:.3f}", f"{f.wire_p99:.3f}", p99]
            sheet.rows.append([str(r.point.index), f.name, str(f.count), *row, send])
        if wire.scope:
            sheet.note(f"point {r.point.index}: {wire.scope}")
        if wire.unmatched or wire.drops or wire.truncated:
            why = "".join(f"; {n}: {reason}" for reason, n in sorted(wire.unmatched_why.items()))
            sheet.note(f"point {r.point.index}: {wire.unmatched} requests not matched, {wire.drops} packets dropped{why}")
    return sheet


def quality_sheet(results: JobResults) -> Sheet | None:
    """A job with `quality:`: per point, the served model's accuracy against the data's labels (each with its 95%
    interval and sample count) and what the pass took; a check that could not run says why. None without `quality:`."""
    points = [r for r in results.points if r.quality is not None]
    if not points:
        return None
    if any(r.point.llm is not None for r in points):
        return llm_quality_sheet(results, points)
    agreement = any(r.quality is not None and r.quality.agreement is not None for r in points)
    errors = any(r.quality is not None and r.quality.error is not None for r in points)
    sheet = Sheet(
        title="quality: accuracy of the served answers against the data's labels (95% intervals)"
        if not errors
        else "quality: accuracy and error of the served answers against the data's labels and true values (95% intervals)",
        columns=[
            Col("#"),
            Col("backend", right=False),
            Col("batch"),
            Col("samples"),
            Col("top-1", right=False),
            Col("top-k", right=False, rank=1),
            *([Col("agrees with the reference", right=False), Col("max |Δ|", rank=1)] if agreement else []),
            *([Col("error against the targets", right=False)] if errors else []),
            Col("pass s", rank=2),
        ],
    )
    for r in points:
        quality = r.quality
        assert quality is not None
        accuracy = quality.accuracy
        top1 = accuracy.top1.points() if accuracy else "-"
        top1 += _below(quality)
        if quality.not_run:
            top1 += " not run " + sheet.note(f"point {r.point.index}: " + "; ".join(quality.not_run))
        topk = f"top-{accuracy.k} {accuracy.topk.points()}" if accuracy and accuracy.topk else "-"
        samples = str(accuracy.top1.samples) if accuracy else "-"
        agreed = []
        if agreement:
            a = quality.agreement
            agreed = [a.top1.points(), f"{a.max_abs_diff:.3g}"] if a else ["-", "-"]
        if errors:
            agreed.append(quality.error.shown() if quality.error else "-")
        if samples == "-" and quality.error:
            samples = str(quality.error.samples)
        row = [str(r.point.index), r.point.backend, str(r.point.batch_size), samples, top1, topk, *agreed]
        sheet.rows.append([*row, f"{quality.seconds:.2f}"])
    if agreement:
        reference = next(r.quality.agreement.reference for r in points if r.quality and r.quality.agreement)
        sheet.note(f"the reference: {reference}; agreement is the share of samples whose top class is the reference's")
    return sheet


def _below(quality: Quality) -> str:
    """A point below its job's quality floor says so beside its score."""
    return f" below the floor {100 * quality.floor:g}%" if quality.floor_met is False and quality.floor is not None else ""


def llm_quality_sheet(results: JobResults, points: Sequence[PointResult]) -> Sheet:
    """A language model's `quality:` per point: the evaluation set's accuracy by its scorer, and the greedy completions'
    agreement with the reference configuration's (identical ones, tokens matched at their place, where they first
    differ), each share with its 95% interval; a configuration's later points carry its first point's figures."""
    sheet = Sheet(
        title="quality: greedy completions, scored and set against the reference's (95% intervals)",
        columns=[
            Col("#"),
            Col("backend", right=False),
            Col("samples"),
            Col("evaluation", right=False),
            Col("identical", right=False),
            Col("tokens matched", right=False, rank=1),
            Col("first diff", rank=1),
            Col("pass s", rank=2),
        ],
    )
    for r in points:
        quality = r.quality
        assert quality is not None
        accuracy, agreed = quality.accuracy, quality.completions
        backend = f"{r.point.backend} {sweep_label(results.job.spec.sweep, r.point.server)}".strip()
        evaluation = (f"{accuracy.name()} {accuracy.top1.points()}" if accuracy else "-") + _below(quality)
        samples = accuracy.top1.samples if accuracy else agreed.exact.samples if agreed else None
        matched = agreed.tokens.points() if agreed and agreed.tokens else "-"
        first = f"{agreed.first_difference:.1f}" if agreed and agreed.first_difference is not None else "-"
        if quality.not_run:
            evaluation += " " + sheet.note(f"point {r.point.index}: " + "; ".join(quality.not_run))
        took = f"{quality.seconds:.2f}" if quality.from_point is None else f"as #{quality.from_point}"
        identical = agreed.exact.points() if agreed else "-"
        sheet.rows.append([str(r.point.index), backend, str(samples or "-"), evaluation, identical, matched, first, took])
    if reference := next((r.quality.completions for r in points if r.quality and r.quality.completions), None):
        sheet.note(
            f"the reference: {reference.reference}; tokens as "
            + ("each server named them" if reference.tokens_from == "server" else "the model's tokenizer splits the text")
            + "; first diff: the mean place of the first differing token"
        )
    return sheet


def search_sheet(result: PointResult) -> Sheet:
    """A search point's answer (its interval and how it stopped, as the title) and every probe in the order run: the
    load, what it achieved, the p99 with its 95% interval or the attainment with its interval, and the verdict."""
    answer = result.search
    assert answer is not None
    sheet = Sheet(
        title=f"search, point {result.point.index}: {answer.summary()}",
        columns=[
            Col("probe"),
            Col("load"),
            Col("achieved", rank=1),
            Col("p99 ms"),
            Col("p99 95% CI", rank=2),
            Col("attained", rank=1),
            Col("verdict", right=False),
        ],
    )
    for k, probe in enumerate(answer.probes):
        ci = f"{probe.p99_ci_ms[0]:.2f}-{probe.p99_ci_ms[1]:.2f}" if probe.p99_ci_ms else "-"
        attained = _pct(probe.attainment)
        if probe.attainment_ci:
            attained += f" [{_pct(probe.attainment_ci[0])}-{_pct(probe.attainment_ci[1])}]"
        verdict = "pass" if probe.passed else "FAIL"
        if not probe.valid:
            verdict += " (invalid) " + sheet.note("; ".join(probe.reasons))
        if probe.uncertain:
            verdict += ", uncertain"
        if probe.pooled:
            verdict += ", pooled"
        verdict += " *" if k == answer.chosen else ""
        row = [str(k), f"{probe.load:g}", f"{probe.achieved_rate:.1f}", _ms_value(probe.p99_ms), ci, attained, verdict]
        sheet.rows.append(row)
    for text in answer.notes:
        sheet.note(text)
    sheet.footer = (
        f"load in {answer.unit}, achieved in req/s; *: the probe whose run is the point's figures and records; "
        "uncertain: the interval held the limit"
    )
    return sheet


def _ms_value(value: float | None) -> str:
    return f"{value:.2f}" if value is not None else "-"


def _pct(value: float | None) -> str:
    return f"{100 * value:.1f}%" if value is not None else "-"


def repeats_sheet(results: JobResults) -> Sheet:
    """Per configuration run more than once: its runs' p99s, the spread (CV) of p50, p99 and req/s, the verdict (its
    explanation a numbered note)."""
    sheet = Sheet(
        title="repeats: spread across runs (CV flagged ! above 5%) against each run's 95% CI",
        columns=[
            Col("backend", right=False),
            Col("batch"),
            Col("load"),
            Col("runs"),
            Col("p99 ms per run", right=False, rank=2),
            Col("p50 CV", rank=1),
            Col("p99 CV"),
            Col("req/s CV", rank=1),
            Col("verdict", right=False),
        ],
    )
    for r in results.repeats:
        p50, p99, throughput = r.metrics
        runs = f"{len(r.runs)}" + (f" ({len(r.invalid_runs)} invalid)" if r.invalid_runs else "")
        sheet.rows.append(
            [
                r.backend,
                str(r.batch_size),
                r.load,
                runs,
                ", ".join(f"{v:.2f}" if v is not None else "-" for v in p99.values),
                *(_pct(m.cv) + ("!" if m.cv_flagged else "") for m in (p50, p99, throughput)),
                f"{r.verdict.replace('_', ' ')} {sheet.note(r.text)}",
            ]
        )
    return sheet


def simple_sheet(columns: Sequence[str | Col], rows: Iterable[Sequence[str]], *, title: str = "") -> Sheet:
    """A sheet of text cells under the given columns (a bare name: left-aligned, always shown)."""
    cols = [c if isinstance(c, Col) else Col(c, right=False) for c in columns]
    return Sheet(columns=cols, title=title, rows=[list(row) for row in rows])


def footprint_sheet(footprint: JobFootprint) -> Sheet:
    """A job's data in PerfDB, kind by kind: removed (a deletion) or held (a dry run)."""
    verb = "deleted" if footprint.deleted else "would delete (dry run)"
    rows = [[kind, str(s.documents), f"{s.bytes:,}"] for kind, s in footprint.kinds.items()]
    total = sum(s.documents for s in footprint.kinds.values())
    rows.append(["total", str(total), f"{footprint.bytes:,}"])
    columns = (Col("kind", right=False), Col("documents"), Col("bytes"))
    return simple_sheet(columns, rows, title=f"{verb}: job {footprint.job_id}")


def jobs_sheet(jobs: list[JobView]) -> Sheet:
    """One row per job."""
    return simple_sheet(
        (
            Col("id", right=False),
            Col("name", right=False),
            Col("model", right=False, rank=2),
            Col("state", right=False),
            Col("attempt", rank=3),
            Col("follower", right=False, rank=2),
            Col("points", rank=1),
            Col("created", right=False, rank=1),
        ),
        (
            (
                job.id,
                job.name,
                job.model_ref,
                job.state,
                str(job.attempt),
                job.follower_id or "-",
                f"{job.points_done}/{job.points_total}",
                job.created_at.strftime("%Y-%m-%d %H:%M:%S"),
            )
            for job in jobs
        ),
    )


def point_label(point: PointSpec) -> str:
    """A short name of a point: backend, batch and load."""
    return f"{point.backend} b{point.batch_size} @ {point.load_label()}"
