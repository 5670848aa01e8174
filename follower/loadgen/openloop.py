"""The open loop: send each request at its precomputed time, whatever the server is doing, and record everything.

Four monotonic-ns timestamps per request (intended, sent, first byte, done), the status and the server's stage
timings go into preallocated arrays (follower.loadgen.records): no per-request Python objects survive the run, so
the collector adds no GC pressure of its own and summaries are vectorised. This module knows the schedule, the
in-flight cap and the records; when requests leave is follower.loadgen.timing's, how they travel is a transport's
(follower.protocols.transports). docs/loadgen/timing.md has the measurements behind the design.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import gc
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Literal

import numpy as np

from follower.loadgen import timing
from follower.loadgen.cap import CapRule
from follower.loadgen.llmrecords import LlmColumns
from follower.loadgen.records import DROPPED, STAGES, TRANSPORT_ERROR, UNANSWERED, LoadRecords
from follower.loadgen.timing import TIMERS, Timer
from follower.protocols import Endpoint, protocol_of
from follower.protocols.transports import NO_CREDENTIALS, Answer, Credentials, Transport

__all__ = ["CapPolicy", "LoadRecords", "Timer", "drive", "run_open_loop"]

# How far in the future the first request is scheduled, so the timer thread and ticker are running before it.
DEFAULT_LEAD_NS = 50_000_000
CapPolicy = Literal["wait", "drop"]
# Called on the loop every tick with the records so far and the time; returning True ends the run there.
TickCallback = Callable[[LoadRecords, int], bool]


class _Driver:
    """One run's in-flight accounting and recording (on the event loop); the transport carries the requests."""

    def __init__(
        self,
        transport: Transport,
        bodies: Sequence[bytes],
        records: LoadRecords,
        stop: threading.Event,
        max_concurrency: int,
        cap_policy: CapPolicy,
        body_index: np.ndarray | None,
    ) -> None:
        self.transport, self.rec, self.stop = transport, records, stop
        self.encoded = [transport.encode(b) for b in bodies]  # built once, reused per request
        # Request i sends bodies[pick[i]] (a trace's per-request input) or, by default, bodies[i % len(bodies)].
        n = len(self.encoded)
        self.pick: list[int] = body_index.tolist() if body_index is not None else [i % n for i in range(len(records))]
        self.max_concurrency, self.cap_policy = max_concurrency, cap_policy
        self.in_flight = 0
        self.waiting: collections.deque[int] = collections.deque()  # capped requests (policy wait), in order
        self.live: set[_Slot] = set()
        self.drained = asyncio.Event()
        self.dispatched = asyncio.Event()
        # Plain ints are faster to compare than numpy scalars in the dispatcher's hot loop.
        self.intended: list[int] = records.intended_ns.tolist()

    def launch(self, i: int) -> None:
        """Request i is due now: send it, or (cap full) let it wait its turn or drop it, as the policy says."""
        if self.in_flight >= self.max_concurrency:
            self.rec.capped[i] = True
            if self.cap_policy == "drop":
                self.rec.status[i] = DROPPED
            else:
                self.waiting.append(i)  # sent when a request ahead of it is answered; its wait is send lag
            return
        self._send(i)

    def set_cap(self, cap: int) -> None:
        """A new in-flight cap; requests waiting for a slot go as soon as the larger cap lets them."""
        self.max_concurrency = cap
        while self.waiting and self.in_flight < cap and not self.stop.is_set():
            self._send(self.waiting.popleft())

    def _send(self, i: int) -> None:
        self.in_flight += 1
        slot = _Slot(self, i)
        self.live.add(slot)
        self.transport.begin(self.encoded[self.pick[i]], slot)

    def answered(self, slot: _Slot, answer: Answer) -> None:
        rec, i = self.rec, slot.i
        rec.done_ns[i] = answer.done_ns
        rec.first_byte_ns[i] = answer.first_ns
        rec.status[i] = answer.status
        if answer.stages:
            stages = rec.stages_ns
            for stage in STAGES:
                value = answer.stages.get(stage)
                if isinstance(value, int):
                    stages[stage][i] = value
        if answer.error is not None and rec.error_sample is None:
            rec.error_sample = answer.error
        if answer.stream is not None:
            if rec.llm is None:
                rec.llm = LlmColumns.allocate(len(rec))
            rec.llm.add(i, answer.stream)
        self._release(slot)

    def failed(self, slot: _Slot, exc: BaseException) -> None:
        """A request that got no answer (refused, reset, malformed, timed out)."""
        rec, i = self.rec, slot.i
        rec.done_ns[i] = time.monotonic_ns()
        rec.status[i] = TRANSPORT_ERROR
        if rec.error_sample is None:
            rec.error_sample = f"{type(exc).__name__}: {exc}"
        self._release(slot)

    def _release(self, slot: _Slot) -> None:
        self.live.discard(slot)
        self.in_flight -= 1
        if self.waiting and not self.stop.is_set():
            self._send(self.waiting.popleft())
        elif not self.in_flight and (self.dispatched.is_set() or self.stop.is_set()):
            self.drained.set()

    async def drain(self, timeout_s: float) -> None:
        """Wait until every request sent has been answered or failed (at most `timeout_s`). Once the run is stopped
        (cancelled, or ended early by its windows), requests still waiting for a slot are never sent: nothing waits for
        them (a cancelled point used to wait out the whole bound, twice the request timeout, for requests never sent)."""
        if self.in_flight or (self.waiting and not self.stop.is_set()):
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.drained.wait(), timeout_s)

    def abandon(self, why: str) -> None:
        """The run is over: requests still unanswered are recorded so (errors whose latency is unknown); capped ones
        still waiting were never sent."""
        for slot in list(self.live):
            slot.finished = True
            self.rec.status[slot.i] = UNANSWERED
            if self.rec.error_sample is None:
                self.rec.error_sample = f"request still unanswered when the run ended ({why})"
        self.live.clear()
        self.waiting.clear()


class _Slot:
    """The Reply of one request: its events go to the driver once, and none after the run is abandoned."""

    __slots__ = ("driver", "i", "finished")

    def __init__(self, driver: _Driver, i: int) -> None:
        self.driver, self.i, self.finished = driver, i, False

    def sent(self, ns: int) -> None:
        self.driver.rec.sent_ns[self.i] = ns

    def via(self, port: int) -> None:
        self.driver.rec.port[self.i] = port

    def answered(self, answer: Answer) -> None:
        if not self.finished:
            self.finished = True
            self.driver.answered(self, answer)

    def failed(self, exc: BaseException) -> None:
        if not self.finished:
            self.finished = True
            self.driver.failed(self, exc)


async def run_open_loop(
    transport: Transport,
    bodies: Sequence[bytes],
    offsets_ns: np.ndarray,
    start_ns: int,
    *,
    max_concurrency: int = 256,
    timer: Timer = "yield",
    stop: threading.Event | None = None,
    cap_policy: CapPolicy = "wait",
    on_tick: TickCallback | None = None,
    tick_every_ns: int = 1_000_000_000,
    body_index: np.ndarray | None = None,
    cap_rule: CapRule | None = None,
    drain_s: float | None = None,
) -> LoadRecords:
    """Send bodies[i % len] (or bodies[body_index[i]]) through `transport` at start_ns + offsets_ns[i] (monotonic ns).

    With `cap_rule`, the in-flight cap becomes what the rule decides at its time (the cap that follows the load).
    After the last request is due, answers still outstanding are awaited at most `drain_s` (None: until every request
    has answered or timed out); those still unanswered then are recorded UNANSWERED.
    """
    if not bodies:
        raise ValueError("need at least one request body")
    if body_index is not None and (
        len(body_index) != len(offsets_ns)
        or (len(body_index) and (int(body_index.min()) < 0 or int(body_index.max()) >= len(bodies)))
    ):
        raise ValueError("body_index must give each request an index into bodies")
    if timer not in TIMERS:
        raise ValueError(f"unknown timer {timer!r}; known: {', '.join(TIMERS)}")
    stop = stop or threading.Event()
    rec = LoadRecords.allocate(start_ns, offsets_ns, timer)
    driver = _Driver(transport, bodies, rec, stop, max_concurrency, cap_policy, body_index)
    loop = asyncio.get_running_loop()
    lags: list[int] = []

    def ticked(now: int) -> None:
        if on_tick is not None and on_tick(rec, now) and not stop.is_set():
            rec.stopped_ns = now
            stop.set()
            driver.dispatched.set()

    margin = timing.margin_for(timer)
    ticker = loop.create_task(timing.tick(lags, ticked if on_tick else None, start_ns + tick_every_ns, tick_every_ns))

    async def retune(rule: CapRule) -> None:
        await asyncio.sleep(max(0, start_ns + rule.at_ns - time.monotonic_ns()) / 1e9)
        if not stop.is_set():
            driver.set_cap(rule.decide(rec, time.monotonic_ns()))

    retuner = loop.create_task(retune(cap_rule)) if cap_rule is not None else None
    thread: threading.Thread | None = None
    dispatcher: asyncio.Task[None] | None = None
    old_switch = sys.getswitchinterval()
    cpu0, wall0 = time.process_time_ns(), time.monotonic_ns()
    # A collection would pause the loop mid-run; the arrays make no garbage, so defer the collector to the end.
    gc_was_enabled = gc.isenabled()
    gc.disable()
    why = "cancelled"  # why requests still in flight when the run ends were cut (unless the drain says otherwise)
    try:
        if timer == "thread":
            sys.setswitchinterval(timing.SWITCH_INTERVAL_S)
            thread = threading.Thread(
                target=timing.dispatch_in_thread,
                name="loadgen-timer",
                daemon=True,
                args=(loop, driver.intended, driver.launch, stop, driver.dispatched),
            )
            thread.start()
        else:
            dispatcher = loop.create_task(
                timing.dispatch_on_loop(driver.intended, driver.launch, stop, driver.dispatched, margin)
            )
        await driver.dispatched.wait()
        # Without a bound, a backstop only: each request has its own timeout (after a connect bounded by the same), so a
        # request is recorded as timed out rather than abandoned by this wait.
        bound_s = drain_s if drain_s is not None else 2 * transport.timeout_s + 1.0
        await driver.drain(bound_s)
        why = f"the drain bound of {bound_s:g} s after the last request was due ran out"
    finally:
        stop.set()  # ends the timer thread / dispatcher if we got here by cancellation or error
        sys.setswitchinterval(old_switch)
        ticker.cancel()
        for task in (dispatcher, retuner):
            if task is not None:
                task.cancel()
        driver.abandon(why)
        await transport.abort()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(*(t for t in (ticker, dispatcher, retuner) if t is not None), return_exceptions=True)
        if thread is not None:
            thread.join(timeout=1.0)
        rec.cpu_s = (time.process_time_ns() - cpu0) / 1e9
        rec.wall_s = (time.monotonic_ns() - wall0) / 1e9
        rec.loop_lag_ns = np.asarray(lags, dtype=np.int64)
        rec.cap = driver.max_concurrency
        if timer != "thread":
            rec.spin_s, rec.wake_margin_ns = margin.spun_ns / 1e9, margin.ns
        if gc_was_enabled:
            gc.enable()
    return rec


def drive(
    endpoint: Endpoint,
    bodies: Sequence[bytes],
    offsets_ns: np.ndarray,
    *,
    max_concurrency: int = 256,
    timeout_s: float = 30.0,
    timer: Timer = "yield",
    lead_ns: int = DEFAULT_LEAD_NS,
    stop: threading.Event | None = None,
    cap_policy: CapPolicy = "wait",
    on_tick: TickCallback | None = None,
    tick_every_ns: int = 1_000_000_000,
    start_ns: int | None = None,
    body_index: np.ndarray | None = None,
    cap_rule: CapRule | None = None,
    drain_s: float | None = None,
    credentials: Credentials = NO_CREDENTIALS,
) -> LoadRecords:
    """Run a schedule to completion on a fresh uvloop loop in the calling thread (run it via asyncio.to_thread).

    `start_ns` (absolute monotonic ns) lets several generator processes share one start: CLOCK_MONOTONIC is
    system-wide on Linux. By default the run starts `lead_ns` from now.
    """
    import uvloop

    async def main() -> LoadRecords:
        opened = protocol_of(endpoint).open_transport(
            endpoint, max_concurrency=max_concurrency, timeout_s=timeout_s, credentials=credentials
        )
        async with opened as transport:
            return await run_open_loop(
                transport,
                bodies,
                offsets_ns,
                start_ns if start_ns is not None else time.monotonic_ns() + lead_ns,
                max_concurrency=max_concurrency,
                timer=timer,
                stop=stop,
                cap_policy=cap_policy,
                on_tick=on_tick,
                tick_every_ns=tick_every_ns,
                body_index=body_index,
                cap_rule=cap_rule,
                drain_s=drain_s,
            )

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(main())
