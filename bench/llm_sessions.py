"""bench/llm.py section 5, sessions: agentic sessions against the real vLLM (its CPU build, the canonical LLM), each of
--session-turns turns whose context grows by an answer and a new message per turn, --session-think-s apart, arriving
at --session-rate per second for --session-duration seconds. Per turn index: the mean context (prompt tokens) and TTFT
p50/p99 from the turn's due time; and vLLM's prefix-cache hit share over the run (its /metrics). The reference, in the
same run, is turn 0: how TTFT grows with the context is each later turn's p50 over turn 0's.
"""

from __future__ import annotations

import argparse
import threading
import time

import numpy as np

from common.spec.llm import LlmWorkload, Sessions, ThinkTime, TokenLengths
from common.wire.models import ModelMeta
from follower.backends.stats import llm_server_delta
from follower.backends.vllm import VllmBackend
from follower.loadgen.llmprompts import PromptMaker
from follower.loadgen.schedule import arrival_offsets_ns
from follower.loadgen.sessions import drive_sessions, session_bodies
from follower.loadgen.sessionstats import session_figures


def sessions(
    args: argparse.Namespace, backend: VllmBackend, meta: ModelMeta, maker: PromptMaker, results: dict[str, float]
) -> None:
    turns, duration = args.session_turns, args.session_duration
    workload = LlmWorkload(
        api="completions",
        prompt_tokens=TokenLengths(mean=32),
        output_tokens=TokenLengths(mean=8),
        sessions=Sessions(
            turns=TokenLengths(mean=turns), user_tokens=TokenLengths(mean=16), think_s=ThinkTime(mean=args.session_think_s)
        ),
    )
    starts = arrival_offsets_ns("poisson", args.session_rate, duration, seed=7)
    end_ns = int((duration + turns * (args.session_think_s + 2.0)) * 1e9)  # every session runs to its end
    built = session_bodies(workload, meta.name, maker, starts, seed=7, end_ns=end_ns)
    before = backend.stats()
    t0 = time.monotonic()
    records = drive_sessions(backend.serves(meta), built.bodies, built.plan, threading.Event(), timeout_s=60)
    took = time.monotonic() - t0
    view = llm_server_delta(before, backend.stats())
    window = (records.start_ns, records.start_ns + end_ns)
    figures = session_figures(records, built.plan, built.held, built.asked, window, None)
    assert figures is not None
    print(
        f"5. sessions: {figures.started} sessions of {turns} turns ({int(records.ok.sum())}/{len(records)} requests "
        f"answered in {took:.0f} s), {args.session_think_s:g} s think time, arriving at {args.session_rate:g}/s"
    )
    print(f"{'turn':>5} {'requests':>9} {'context':>8} {'TTFT p50':>9} {'p99':>8} {'p50 / turn 0':>13}")
    first = figures.by_turn[0].ttft_ms
    assert first is not None
    for t in figures.by_turn:
        q = t.ttft_ms
        if q is None:
            continue
        print(f"{t.turn:>5} {t.requests:>9} {t.prompt_tokens_mean:8.0f} {q.p50:9.2f} {q.p99:8.2f} {q.p50 / first.p50:13.2f}")
    last = figures.by_turn[-1].ttft_ms
    assert last is not None
    hit = view.prefix_cache_hit_share if view is not None else None
    print(f"vLLM's prefix cache: {100 * hit:.1f}% of the prompt tokens found" if hit is not None else "no prefix-cache figure")
    slope = np.polyfit([t.prompt_tokens_mean for t in figures.by_turn], [t.ttft_ms.p50 for t in figures.by_turn if t.ttft_ms], 1)[
        0
    ]
    results |= {
        "sessions_started": float(figures.started),
        "sessions_completed": float(figures.completed),
        "sessions_ttft_p50_turn0_ms": first.p50,
        "sessions_ttft_p50_last_ms": last.p50,
        "sessions_ttft_p50_last_over_turn0": last.p50 / first.p50,
        "sessions_ttft_ms_per_1k_context": 1000 * float(slope),
        "sessions_prefix_hit_share": hit if hit is not None else float("nan"),
    }
