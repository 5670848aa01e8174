"""LLM sessions driven against a fake OpenAI-compatible server of fixed timing: each step is due exactly its think
time after the last answer of the step before (fanned-out requests together), the context grows by exactly the
answers and the new message, a step due after the run's end is not sent, the same seed gives the same sessions, and
the per-turn and per-session figures count what was sent."""

from __future__ import annotations

import io
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import orjson
import pytest

from benchfleet.generate.llmgen import LlamaSpec, generate
from common.formats import hfbundle
from common.procs import SupervisedProcess, free_port, http_ready
from common.spec.llm import FanOut, LlmWorkload, Sessions, ThinkTime, TokenLengths
from common.spec.slo import SLO
from follower.loadgen.llmprompts import PromptMaker
from follower.loadgen.sessions import drive_sessions, session_bodies
from follower.loadgen.sessionstats import session_figures
from follower.protocols import Endpoint

pytestmark = pytest.mark.integration

SERVER = Path(__file__).with_name("fake_llm_server.py")
THINK_S = 0.05


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    port = free_port()
    argv = [sys.executable, str(SERVER), "--port", str(port), "--ttft-ms", "5", "--gap-ms", "2"]
    with SupervisedProcess(argv, name="fake LLM server", log_path=tmp_path_factory.mktemp("fake") / "log") as proc:
        proc.wait_ready(http_ready(f"http://127.0.0.1:{port}/v1/models"), timeout_s=30)
        yield f"http://127.0.0.1:{port}/v1/completions"


@pytest.fixture(scope="module")
def maker() -> PromptMaker:
    data, _ = generate(LlamaSpec(layers=1, hidden=64, heads=2, kv_heads=2, intermediate=128, vocab=2048, context=512))
    return PromptMaker(*hfbundle.tokenizer_files(io.BytesIO(data), limit_bytes=10**8))


def _workload(fan_out: FanOut | None = None) -> LlmWorkload:
    sessions = Sessions(
        turns=TokenLengths(dist="uniform", min=3, max=6),
        user_tokens=TokenLengths(mean=8),
        think_s=ThinkTime(mean=THINK_S),
        fan_out=fan_out,
    )
    return LlmWorkload(
        prompt_tokens=TokenLengths(mean=24), output_tokens=TokenLengths(dist="uniform", min=2, max=5), sessions=sessions
    )


@pytest.mark.parametrize("fan_out", [None, FanOut(share=0.5, width=3)])
def test_sessions_wait_for_their_answers_and_grow_their_context(url: str, maker: PromptMaker, fan_out: FanOut | None) -> None:
    starts = np.array([0, 30_000_000, 60_000_000], dtype=np.int64)
    built = session_bodies(_workload(fan_out), "fake", maker, starts, seed=3, end_ns=10**10)
    plan = built.plan
    again = session_bodies(_workload(fan_out), "fake", maker, starts, seed=3, end_ns=10**10)  # replayed: the same
    assert again.bodies == built.bodies and (again.plan.steps, again.plan.think_ns) == (plan.steps, plan.think_ns)
    assert np.array_equal(again.held, built.held) and np.array_equal(again.asked, built.asked)
    records = drive_sessions(Endpoint("openai", url), built.bodies, plan, threading.Event(), timeout_s=30)
    assert records.ok.all() and len(records) == len(built.bodies), records.error_sample
    assert records.llm is not None and records.body is not None
    at = {int(b): k for k, b in enumerate(records.body)}  # body -> its record
    widths = set()
    for k, steps in enumerate(plan.steps):
        assert records.intended_ns[at[steps[0][0]]] == records.start_ns + starts[k]
        for s in range(1, len(steps)):
            before, step = steps[s - 1], steps[s]
            widths.add(len(step))
            answered = max(int(records.done_ns[at[b]]) for b in before)
            # due exactly its think time after the step before's last answer, every request of the step together
            assert {int(records.intended_ns[at[b]]) for b in step} == {answered + plan.think_ns[k][s]}
            assert plan.think_ns[k][s] == THINK_S * 1e9
            # the context so far, the step before's answers and a new message of user_tokens
            main = step[0]
            previous = before[0]
            grown = built.held[previous] + built.asked[list(before)].sum() + 8
            if len(before) > 1:  # a fanned-out step's own sub-tasks are not the main context's
                previous_context = built.held[previous] - 8
                grown = previous_context + built.asked[list(before)].sum() + 8
            assert built.held[main] == grown, (k, s)
    assert widths == ({1} if fan_out is None else {1, 3})
    # The server counted every prompt as built (a word a token, and the beginning of the sequence).
    assert np.array_equal(records.llm.prompt_tokens, built.held[records.body])
    assert np.array_equal(records.llm.completion_tokens, built.asked[records.body])
    prompts = [orjson.loads(body)["prompt"] for body in built.bodies]
    for k, steps in enumerate(plan.steps):  # each turn's prompt starts with the context of the one before
        for before, step in zip(steps, steps[1:], strict=False):
            # the step before's prompt, less its sub-task of 8 words where it fanned out
            context = prompts[before[0]] if len(before) == 1 else " ".join(prompts[before[0]].split(" ")[:-8])
            assert all(prompts[b].startswith(context) for b in step), k
    window = (records.start_ns, records.start_ns + 10**10)
    figures = session_figures(records, plan, built.held, built.asked, window, SLO(ttft_ms=10_000))
    assert figures is not None
    assert (figures.started, figures.completed, figures.cut, figures.failed) == (3, 3, 0, 0)
    assert [t.requests for t in figures.by_turn] == [
        sum(len(s[t]) for s in plan.steps if len(s) > t) for t in range(6) if any(len(s) > t for s in plan.steps)
    ]
    assert figures.by_turn[0].ttft_ms is not None and figures.by_turn[0].ttft_ms.count == 3
    assert figures.goodput_share == 1.0 and figures.session_ms is not None and figures.session_ms.count == 3


def test_a_step_due_after_the_end_is_not_sent_and_its_session_is_cut(url: str, maker: PromptMaker) -> None:
    starts = np.array([0], dtype=np.int64)
    built = session_bodies(_workload(), "fake", maker, starts, seed=5, end_ns=int(1.5 * THINK_S * 1e9))
    records = drive_sessions(Endpoint("openai", url), built.bodies, built.plan, threading.Event(), timeout_s=30)
    # The first turn at 0, the second a think time after its answer (< the end), the third past the end.
    assert len(records) == 2 and records.ok.all() and len(built.plan.steps[0]) >= 3
    figures = session_figures(records, built.plan, built.held, built.asked, (records.start_ns, records.start_ns + 10**10), None)
    assert figures is not None and (figures.started, figures.completed, figures.cut) == (1, 0, 1)
    assert figures.goodput is None and figures.session_ms is None


def test_a_stopped_run_does_not_wait_out_a_think_time(url: str, maker: PromptMaker) -> None:
    """Cancelled (the point's stop set) while its sessions think: no later turn is sent, and the driver returns without
    waiting out the 30 s pause."""
    workload = _workload().model_copy(update={"sessions": Sessions(turns=TokenLengths(mean=3), think_s=ThinkTime(mean=30.0))})
    built = session_bodies(workload, "fake", maker, np.array([0], dtype=np.int64), seed=5, end_ns=10**11)
    stop = threading.Event()
    timer = threading.Timer(0.5, stop.set)
    timer.start()
    began = time.monotonic()
    records = drive_sessions(Endpoint("openai", url), built.bodies, built.plan, stop, timeout_s=30)
    timer.cancel()
    assert len(records) == 1 and records.ok.all()  # the first turn only
    assert time.monotonic() - began < 10  # not the 30 s think time
