"""Sheets of a language model's points: their latencies and tokens, and a sessions point's turns."""

from __future__ import annotations

from benchfleet.tables import Col, Sheet
from common.wire.imports import TOOL_NAMES
from common.wire.jobs import JobResults
from common.wire.results import Percentiles, PointResult


def ms(p: Percentiles | None, attr: str) -> str:
    value = getattr(p, attr) if p is not None else None  # an imported point's tool may not report every quantile
    return f"{value:.2f}" if value is not None else "-"


def _share(value: float | None) -> str:
    return f"{100 * value:.0f}%" if value is not None else "-"


def llm_sheet(results: JobResults) -> Sheet | None:
    """Per language-model point: time to first token (from the intended time, and from the send), the server's
    prefix-cache hit share beside it, inter-token latency, time per output token, token throughput, goodput and the
    token counts; None for a tensor model's job."""
    points = [r for r in results.points if r.llm is not None]
    if not points:
        return None
    tool = results.job.imported
    title = "language model: latencies in ms (from the intended time; 'sent': from the send)"
    sheet = Sheet(
        title=f"language model: latencies in ms and tokens as {TOOL_NAMES[tool.tool]} counts them" if tool else title,
        columns=[
            Col("#"),
            Col("load"),
            Col("TTFT p50", rank=1),
            Col("TTFT p99"),
            Col("prefix hits", rank=2),
            Col("sent p99", rank=3),
            Col("ITL p50", rank=2),
            Col("ITL p99", rank=1),
            Col("TPOT p50", rank=2),
            Col("out tok/s"),
            Col("items/s", rank=3),
            Col("goodput/s", rank=1),
            Col("tokens asked/server/client", rank=3),
        ],
    )
    for r in points:
        llm = r.llm
        assert llm is not None
        if llm.prompt_rendering_tokens:
            sheet.notes.append(
                f"point {r.point.index}: the server counted every prompt {llm.prompt_rendering_tokens} token"
                f"{'s' if abs(llm.prompt_rendering_tokens) != 1 else ''} longer than it was built (its own rendering of "
                "the messages); every request agreed with that"
            )
        goodput = f"{llm.goodput_rps:.2f}" if llm.goodput_rps is not None else "-"
        sheet.rows.append(
            [
                str(r.point.index),
                r.imported.level if r.imported else r.point.load_label(),
                ms(llm.ttft_ms, "p50"),
                ms(llm.ttft_ms, "p99"),
                _share(llm.server.prefix_cache_hit_share if llm.server is not None else None),
                ms(llm.ttft_sent_ms, "p99"),
                ms(llm.itl_ms, "p50"),
                ms(llm.itl_ms, "p99"),
                ms(llm.tpot_ms, "p50"),
                f"{llm.output_tokens_per_s:.1f}",
                f"{llm.items_per_s:.1f}" if llm.items_per_s is not None else "-",
                goodput,
                "-" if r.imported else f"{llm.output_tokens_asked}/{llm.output_tokens_server}/{llm.output_tokens_client}",
            ]
        )
    return sheet


def sessions_sheet(r: PointResult) -> Sheet:
    """A sessions point's turns (the growing context and its time to first token, per turn index) and sessions."""
    sessions = r.llm.sessions if r.llm is not None else None
    assert sessions is not None
    took = sessions.session_ms
    said = [
        f"{sessions.started} sessions started, {sessions.completed} completed, {sessions.cut} cut at the end, "
        f"{sessions.failed} failed; {sessions.turns_mean:.1f} turns each",
        f"session time p50 {ms(took, 'p50')} ms, p99 {ms(took, 'p99')} ms" if took is not None else "",
        f"tokens per session {sessions.tokens_mean:.0f}" if sessions.tokens_mean is not None else "",
        f"session goodput {sessions.goodput:.2f}/s ({_share(sessions.goodput_share)} of the sessions met the SLO)"
        if sessions.goodput is not None
        else "",
    ]
    sheet = Sheet(
        title=f"point {r.point.index}: sessions by turn (TTFT in ms from the turn's due time); "
        + "; ".join(x for x in said if x),
        columns=[Col("turn"), Col("requests"), Col("prompt tokens"), Col("TTFT p50", rank=1), Col("TTFT p99", rank=1)],
    )
    for turn in sessions.by_turn:
        row = [
            str(turn.turn),
            str(turn.requests),
            f"{turn.prompt_tokens_mean:.0f}",
            ms(turn.ttft_ms, "p50"),
            ms(turn.ttft_ms, "p99"),
        ]
        sheet.rows.append(row)
    return sheet
