"""Multi-turn sessions (`llm.sessions`): their request bodies, built before the run, and the driver that sends them.

A session arrives at its open-loop offset and runs its steps one after the other: a step is one turn, or a fanned-out
turn's sub-agent requests issued together; the next step is due `think` after the step's last answer arrived, and is
sent then (its intended time: its latency counts from it). The context grows: a turn's prompt is the context so far,
the answers of the step before (replayed as text of the length asked, which ignore_eos makes the length generated)
and a new message. A session's turns, lengths and pauses are drawn from `llm.sessions`, or a session trace's
(`from_trace`). Prompts are pool words (one token each, follower/loadgen/llmprompts.py), so every request's length
is known exactly before the run and checked by the model's tokenizer. A step due after the run's end is not sent: its
session is cut there. Everything is drawn from the point's seed: the same sessions, lengths and pauses on every replay.
"""

from __future__ import annotations

import asyncio
import gc
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from common.formats.traces import Trace
from common.spec.llm import LlmWorkload, Sessions
from follower.loadgen import timing
from follower.loadgen.llmprompts import Prompt, PromptMaker, request_body
from follower.loadgen.llmrecords import LlmColumns
from follower.loadgen.records import STAGES, TRANSPORT_ERROR, LoadRecords
from follower.protocols import Endpoint, protocol_of
from follower.protocols.transports import NO_CREDENTIALS, Credentials, Transport
from follower.protocols.transports.base import Stream

MAX_SESSION_BODIES = 200_000  # requests one point's sessions may hold (each a body built before the run)
MAX_OPEN = 4096  # connections the sessions' transport may hold open at once
STOP_CHECK_NS = 50_000_000  # a session waiting out a think time looks for a stop this often


@dataclass(frozen=True)
class SessionPlan:
    """Each session's arrival (ns from the run's start), its steps (the body indices each step sends together) and
    the pause before each step (0 before the first); per body, its session and turn."""

    starts_ns: np.ndarray
    steps: tuple[tuple[tuple[int, ...], ...], ...]
    think_ns: tuple[tuple[int, ...], ...]
    session_of: np.ndarray
    turn_of: np.ndarray
    end_ns: int  # no step is sent at or after this offset

    def __len__(self) -> int:
        return len(self.starts_ns)


@dataclass(frozen=True)
class SessionBodies:
    plan: SessionPlan
    bodies: list[bytes]
    held: np.ndarray  # each request's prompt tokens, as the server counts them
    asked: np.ndarray  # each request's output tokens


class _Builder:
    """One point's session bodies, in order."""

    def __init__(self, workload: LlmWorkload, model_name: str, maker: PromptMaker, rng: np.random.Generator) -> None:
        self.workload, self.model_name, self.maker, self.rng = workload, model_name, maker, rng
        self.chat = workload.templated
        self.bodies: list[bytes] = []
        self.held: list[int] = []
        self.asked: list[int] = []
        self.session_of: list[int] = []
        self.turn_of: list[int] = []

    def words(self, n: int) -> str:
        return "".join(self.rng.choice(self.maker.pool, size=int(n)))

    def add(self, prompt: Prompt, asked: int, session: int, turn: int) -> int:
        if len(self.bodies) >= MAX_SESSION_BODIES:
            raise ValueError(f"the sessions hold more than {MAX_SESSION_BODIES} requests: lower load.rate or the turns")
        if self.chat:
            held = self.maker.count_chat(prompt)
        else:
            assert isinstance(prompt, str)
            held = self.maker.count(prompt)
        self.bodies.append(request_body(self.workload, self.model_name, prompt, asked))
        self.held.append(held)
        self.asked.append(asked)
        self.session_of.append(session)
        self.turn_of.append(turn)
        return len(self.bodies) - 1


@dataclass(frozen=True)
class Script:
    """One session in lengths: its first prompt's tokens (as the server counts it), then per later step the (new
    message's tokens, answer's tokens) of each request it issues together (the first step: one request, whose new
    message is the first prompt), and the pause before each step (0 before the first)."""

    first: int
    steps: tuple[tuple[tuple[int, int], ...], ...]
    think_ns: tuple[int, ...]


def drawn_script(workload: LlmWorkload, spec: Sessions, rng: np.random.Generator) -> Script:
    """A session drawn from `spec`: its turns, lengths, fan-out and pauses."""
    turns = int(spec.turns.draw(1, rng)[0])
    think = spec.think_s.draw(turns, rng)
    think[0] = 0
    first = int(workload.prompt_tokens.draw(1, rng)[0])
    steps = []
    for turn in range(turns):
        fan = spec.fan_out is not None and turn > 0 and rng.random() < spec.fan_out.share
        width = spec.fan_out.width if fan and spec.fan_out is not None else 1
        user = spec.user_tokens.draw(width, rng) if turn > 0 else np.zeros(1, dtype=np.int64)
        steps.append(tuple((int(u), int(a)) for u, a in zip(user, workload.output_tokens.draw(width, rng), strict=True)))
    return Script(first, tuple(steps), tuple(int(t) for t in think))


def trace_scripts(trace: Trace) -> list[Script]:
    """A session trace's sessions (its entries session by session, each a turn: common.formats.traces)."""
    if trace.session_of is None or trace.delay_ns is None or trace.prompt_tokens is None or trace.output_tokens is None:
        raise ValueError("the trace holds no sessions")
    bounds = np.flatnonzero(np.diff(trace.session_of)) + 1
    scripts = []
    for turns in np.split(np.arange(len(trace)), bounds) if len(trace) else []:
        user = [0, *(int(trace.prompt_tokens[k]) for k in turns[1:])]
        steps = tuple(((u, int(trace.output_tokens[k])),) for u, k in zip(user, turns, strict=True))
        scripts.append(Script(int(trace.prompt_tokens[turns[0]]), steps, tuple(int(trace.delay_ns[k]) for k in turns)))
    return scripts


def _session(b: _Builder, script: Script, session: int) -> tuple[tuple[int, ...], ...]:
    """The bodies of one session's steps, added to `b` (their words drawn from `b`'s generator)."""
    first_words = b.words(max(script.first - (b.maker.chat_overhead() if b.chat else b.maker.added), 1))
    # The context as text (completions) or messages (chat); a step's answers are appended before the next message.
    text, messages = first_words, [("user", first_words.lstrip())]
    steps: list[tuple[int, ...]] = []
    answers: list[str] = []
    for turn, requests in enumerate(script.steps):
        if turn > 0:
            text += "".join(answers)
            messages.append(("assistant", "".join(answers).lstrip()))
        answers, step = [], list[int]()
        for user, asked in requests:
            new = b.words(user) if turn > 0 else ""
            prompt: Prompt = [*messages, ("user", new.lstrip())] if b.chat and new else list(messages)
            step.append(b.add(prompt if b.chat else text + new, asked, session, turn))
            answers.append(b.words(asked))
            if len(requests) == 1 and new:
                text += new
                messages.append(("user", new.lstrip()))
        steps.append(tuple(step))
    return tuple(steps)


def session_bodies(
    workload: LlmWorkload,
    model_name: str,
    maker: PromptMaker,
    starts_ns: np.ndarray,
    seed: int,
    end_ns: int,
    scripts: Sequence[Script] | None = None,
) -> SessionBodies:
    """The bodies of sessions arriving at `starts_ns`: `scripts` (a session trace's), or each drawn from
    `llm.sessions` (their steps, lengths and pauses from `seed`); their words from `seed`."""
    spec = workload.sessions
    if spec is None:
        raise ValueError("the workload has no sessions")
    if scripts is not None and len(scripts) != len(starts_ns):
        raise ValueError(f"{len(scripts)} sessions for {len(starts_ns)} arrivals")
    b = _Builder(workload, model_name, maker, np.random.default_rng(seed))
    steps: list[tuple[tuple[int, ...], ...]] = []
    thinks: list[tuple[int, ...]] = []
    for session in range(len(starts_ns)):
        script = scripts[session] if scripts is not None else drawn_script(workload, spec, b.rng)
        steps.append(_session(b, script, session))
        thinks.append(script.think_ns)
    plan = SessionPlan(
        np.asarray(starts_ns, dtype=np.int64),
        tuple(steps),
        tuple(thinks),
        np.asarray(b.session_of, dtype=np.int64),
        np.asarray(b.turn_of, dtype=np.int64),
        end_ns,
    )
    return SessionBodies(plan, b.bodies, np.asarray(b.held, dtype=np.int64), np.asarray(b.asked, dtype=np.int64))


@dataclass
class _Sent:
    body: int
    intended: int
    sent: int
    first: int = -1
    done: int = -1
    status: int = TRANSPORT_ERROR
    stream: Stream | None = None
    stages: dict[str, int] | None = None


async def run_sessions(transport: Transport, bodies: Sequence[bytes], plan: SessionPlan, stop: threading.Event) -> LoadRecords:
    """Every session of `plan` through `transport`, from now; a record per request sent."""
    encoded = [transport.encode(body) for body in bodies]
    start_ns = time.monotonic_ns()
    end_ns = start_ns + plan.end_ns
    out: list[_Sent] = []
    errors: list[str] = []

    async def one(body: int, due: int) -> _Sent:
        now = time.monotonic_ns()
        record = _Sent(body, due, now)
        out.append(record)
        try:
            answer = await transport.request(encoded[body])
            record.first, record.done, record.status = answer.first_ns, answer.done_ns, answer.status
            record.stream, record.stages = answer.stream, dict(answer.stages) if answer.stages else None
            if answer.error is not None and not errors:
                errors.append(answer.error)
        except transport.errors as exc:
            record.done = time.monotonic_ns()
            if not errors:
                errors.append(f"{type(exc).__name__}: {exc}")
        return record

    async def until(due: int) -> bool:
        """Sleep until `due` (False: the run was stopped meanwhile; a long think time is not waited out)."""
        while not stop.is_set():
            left = due - time.monotonic_ns()
            if left <= 0:
                return True
            await asyncio.sleep(min(left, STOP_CHECK_NS) / 1e9)
        return False

    async def session(k: int) -> None:
        due = start_ns + int(plan.starts_ns[k])
        for step, pause in zip(plan.steps[k], plan.think_ns[k], strict=True):
            due += pause
            if due >= end_ns or not await until(due):
                return  # cut at the run's end, or stopped
            answered = await asyncio.gather(*(one(body, due) for body in step))
            due = max(r.done for r in answered)  # the next step waits for every answer of this one

    cpu0, lags = time.process_time_ns(), list[int]()
    gc_was_enabled = gc.isenabled()
    gc.disable()
    tick = asyncio.get_running_loop().create_task(timing.tick(lags))
    try:
        await asyncio.gather(*(session(k) for k in range(len(plan))))
    finally:
        tick.cancel()
        await asyncio.gather(tick, return_exceptions=True)
        if gc_was_enabled:
            gc.enable()
    return _records(out, start_ns, cpu0, lags, errors)


def _stage(stages: dict[str, int] | None, name: str) -> int:
    value = (stages or {}).get(name)
    return value if isinstance(value, int) else -1


def _records(out: list[_Sent], start_ns: int, cpu0: int, lags: list[int], errors: list[str]) -> LoadRecords:
    order = sorted(range(len(out)), key=lambda i: (out[i].intended, out[i].sent))
    rows = [out[i] for i in order]
    llm = None
    if any(r.stream is not None for r in rows):
        llm = LlmColumns.allocate(len(rows))
        for k, r in enumerate(rows):
            if r.stream is not None:
                llm.add(k, r.stream)

    def column(values: list[int]) -> np.ndarray:
        return np.asarray(values, dtype=np.int64)

    return LoadRecords(
        intended_ns=column([r.intended for r in rows]),
        sent_ns=column([r.sent for r in rows]),
        first_byte_ns=column([r.first for r in rows]),
        done_ns=column([r.done for r in rows]),
        status=np.asarray([r.status for r in rows], dtype=np.int32),
        stages_ns={s: column([_stage(r.stages, s) for r in rows]) for s in STAGES},
        start_ns=start_ns,
        cpu_s=(time.process_time_ns() - cpu0) / 1e9,
        wall_s=(time.monotonic_ns() - start_ns) / 1e9,
        loop_lag_ns=column(lags),
        error_sample=errors[0] if errors else None,
        timer="sessions",
        capped=np.zeros(len(rows), dtype=bool),
        llm=llm,
        body=column([r.body for r in rows]),
    )


def drive_sessions(
    endpoint: Endpoint,
    bodies: Sequence[bytes],
    plan: SessionPlan,
    stop: threading.Event,
    *,
    timeout_s: float = 30.0,
    credentials: Credentials = NO_CREDENTIALS,
) -> LoadRecords:
    """Run a point's sessions to their end on a fresh uvloop loop in the calling thread."""
    import uvloop

    width = max((len(step) for steps in plan.steps for step in steps), default=1)

    async def main() -> LoadRecords:
        opened = protocol_of(endpoint).open_transport(
            endpoint,
            max_concurrency=min(MAX_OPEN, max(1, len(plan) * width)),
            timeout_s=timeout_s,
            raw_http=False,
            credentials=credentials,
        )
        async with opened as transport:
            return await run_sessions(transport, bodies, plan, stop)

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(main())
