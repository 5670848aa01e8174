"""A sessions point's figures per turn index and per session, from its records and its session plan: pure."""

from __future__ import annotations

import numpy as np

from common.spec.slo import SLO
from common.stats import summarize_ns
from common.wire.sessions import SessionFigures, TurnFigures
from follower.loadgen.records import LoadRecords
from follower.loadgen.sessions import SessionPlan


def session_figures(
    records: LoadRecords,
    plan: SessionPlan,
    held: np.ndarray,
    asked: np.ndarray,
    window: tuple[int, int],
    slo: SLO | None,
) -> SessionFigures | None:
    """Figures of the sessions whose first turn was due in `window` (absolute monotonic ns), their requests matched
    to sessions and turns by the body each sent; `held` and `asked` per body."""
    cols = records.llm
    if cols is None or records.body is None:
        return None
    start, end = window
    body = records.body
    session, turn = plan.session_of[body], plan.turn_of[body]
    first = cols.first_token_ns()
    answered = records.ok & (first >= 0)
    ttft = np.where(answered, first - records.intended_ns, -1)
    tokens = cols.completion_tokens
    multi = answered & (tokens > 1)
    tpot = np.full(len(body), -1.0)
    tpot[multi] = (cols.last_token_ns()[multi] - first[multi]) / (tokens[multi] - 1)
    arrivals = records.start_ns + plan.starts_ns
    inside = (arrivals >= start) & (arrivals < end)
    expected = np.array([sum(len(step) for step in steps) for steps in plan.steps], dtype=np.int64)
    sent = np.bincount(session, minlength=len(plan))
    fine = np.bincount(session, weights=answered, minlength=len(plan)).astype(np.int64)
    ids = np.flatnonzero(inside)
    completed = ids[(sent[ids] == expected[ids]) & (fine[ids] == expected[ids])]
    in_window = inside[session]
    by_turn = []
    for k in range(int(turn.max()) + 1 if len(turn) else 0):
        of_turn = in_window & (turn == k)
        if of_turn.any():
            ttft_k = ttft[of_turn & answered]
            prompt = held[body[of_turn]]
            figures = TurnFigures(
                turn=k, requests=int(of_turn.sum()), prompt_tokens_mean=float(prompt.mean()), ttft_ms=summarize_ns(ttft_k)
            )
            by_turn.append(figures)
    spans, totals, good = [], [], 0
    for k in completed.tolist():
        mine = session == k
        spans.append(int(records.done_ns[mine].max() - records.intended_ns[mine].min()))
        totals.append(int(held[body[mine]].sum() + asked[body[mine]].sum()))
        if slo is not None and (slo.ttft_ms is not None or slo.tpot_ms is not None):
            met = slo.ttft_ms is None or bool((ttft[mine] <= slo.ttft_ms * 1e6).all())
            met = met and (slo.tpot_ms is None or bool(((tpot[mine] <= slo.tpot_ms * 1e6) | (tokens[mine] <= 1)).all()))
            good += met
    judged = slo is not None and (slo.ttft_ms is not None or slo.tpot_ms is not None)
    return SessionFigures(
        started=len(ids),
        completed=len(completed),
        cut=int((sent[ids] < expected[ids]).sum()),
        failed=int((sent[ids] > fine[ids]).sum()),
        turns_mean=float(np.mean([len(set(turn[session == k].tolist())) for k in ids])) if len(ids) else 0.0,
        by_turn=by_turn,
        session_ms=summarize_ns(np.asarray(spans, dtype=np.int64)),
        tokens_mean=float(np.mean(totals)) if totals else None,
        goodput=good / ((end - start) / 1e9) if judged else None,
        goodput_share=good / len(ids) if judged and len(ids) else None,
    )
