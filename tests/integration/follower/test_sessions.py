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
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import orjson
import pytest

from benchfleet.generate.llmgen import LlamaSpec, generate
from common.formats import hfbundle
from common.formats.traces import Trace, parse_trace
from common.procs import SupervisedProcess, free_port, http_ready
from common.spec.grid import expand
from common.spec.llm import FanOut, LlmWorkload, Sessions, ThinkTime, TokenLengths
from common.spec.parse import parse_spec
from common.spec.slo import SLO
from common.wire.models import LlmParams, ModelMeta
from follower.backends import get_backend
from follower.loadgen.llmprompts import PromptMaker
from follower.loadgen.sessions import drive_sessions, session_bodies
from follower.loadgen.sessionstats import session_figures
from follower.point.context import PointContext, ServerRun
from follower.point.plan import plan_point
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


SESSION_SAMPLE = Path(__file__).resolve().parents[3] / "docs" / "traces" / "mooncake_sessions.jsonl"


def _session_trace_plan(maker: PromptMaker, url: str, trace: Trace):  # type: ignore[no-untyped-def]
    """What the follower plans for the point of a job replaying `trace`'s sessions (load.pattern trace)."""
    spec = parse_spec(
        {
            "name": "j",
            "model": "m:1",
            "backends": ["vllm"],
            "llm": {"sessions": {"from_trace": True}},
            "load": {"pattern": "trace", "trace": {"dataset": "abc"}, "duration": "5s", "warmup": "0s"},
        }
    )
    point = expand(spec)[0]
    model = ModelMeta(
        name="fake",
        version="1",
        format="hf",
        inputs=[],
        outputs=[],
        sha256="0" * 64,
        size_bytes=1,
        created_at=datetime.now(UTC),
        llm=LlmParams(architecture="LlamaForCausalLM", model_type="llama", parameters=1, context_length=512, vocab_size=2048),
    )
    run = ServerRun(model=model, model_path=Path("m"), workdir=Path("unused"), trace=trace)
    backend = get_backend("vllm", server=point.server)
    ctx = PointContext(run=run, backend=backend, endpoint=Endpoint("openai", url, "fake"), backend_version="t", prompts=maker)
    return plan_point(point, ctx)


def test_a_session_trace_replays_its_sessions_arrivals_lengths_and_pauses_the_same_every_time(
    url: str, maker: PromptMaker
) -> None:
    """The repository's session sample (its times scaled by 1/10 to keep the test short) planned and driven twice:
    each session starts at its timestamp, each later turn is due exactly its delay after the answer before it, its
    prompt is the context so far grown by exactly the answer and the new message of its input_length, each answer is
    its output_length as the server counted it; the second replay sends the same bytes at the same offsets."""
    lines = [orjson.loads(line) for line in SESSION_SAMPLE.read_text().splitlines()]
    scaled = [e | {k: e[k] / 10 for k in ("timestamp", "delay") if k in e} for e in lines]
    trace = parse_trace(io.BytesIO(b"".join(orjson.dumps(e) + b"\n" for e in scaled)))
    runs = []
    for _ in range(2):
        plan = _session_trace_plan(maker, url, trace)
        sessions = plan.sessions
        assert sessions is not None and plan.closed and plan.point.rate == trace.sessions / 5.0
        assert plan.prompt_tokens is not None and plan.asked_tokens is not None
        records = drive_sessions(Endpoint("openai", url), plan.bodies, sessions, threading.Event(), timeout_s=30)
        assert records.ok.all() and len(records) == len(lines), records.error_sample
        runs.append((plan, records))
    # replayed, the same bytes, sessions, arrivals and pauses (and below: each run's times are the trace's)
    (first, _), (second, _) = runs
    assert first.bodies == second.bodies and first.sessions is not None and second.sessions is not None
    assert np.array_equal(first.sessions.starts_ns, second.sessions.starts_ns)
    assert (first.sessions.steps, first.sessions.think_ns) == (second.sessions.steps, second.sessions.think_ns)
    for plan, records in runs:
        sessions = plan.sessions
        assert sessions is not None and records.body is not None and records.llm is not None
        at = {int(b): k for k, b in enumerate(records.body)}
        held, asked = plan.prompt_tokens, plan.asked_tokens
        assert held is not None and asked is not None
        # entry i of the trace is body i: its session's turn, its lengths
        assert sessions.session_of.tolist() == trace.session_of.tolist()
        assert asked.tolist() == trace.output_tokens.tolist()
        for k, steps in enumerate(sessions.steps):
            turns = np.flatnonzero(trace.session_of == k)
            assert [s[0] for s in steps] == turns.tolist()
            start = records.intended_ns[at[steps[0][0]]] - records.start_ns
            assert start == trace.offsets_ns[turns[0]] and held[turns[0]] == trace.prompt_tokens[turns[0]]
            for before, now in zip(turns, turns[1:], strict=False):
                # due exactly the trace's delay after the answer before it
                assert records.intended_ns[at[now]] == records.done_ns[at[before]] + trace.delay_ns[now]
                # the context so far, the answer, the new message
                assert held[now] == held[before] + asked[before] + trace.prompt_tokens[now]
        # the server counted every prompt and answer as the trace says
        assert np.array_equal(records.llm.prompt_tokens, held[records.body])
        assert np.array_equal(records.llm.completion_tokens, asked[records.body])
