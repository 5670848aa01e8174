"""The open-loop driver: send each request at its precomputed time, whatever the server is doing.

Four monotonic-ns timestamps per request (intended, sent, first byte, done), the HTTP status and the server's
stage timings go into preallocated numpy arrays: no per-request Python objects survive the run, so the
collector adds no GC pressure of its own and summaries are vectorised.

Timing. asyncio's timers have ~1 ms granularity (epoll timeouts are whole milliseconds, uvloop's clock is
in ms), so `await asyncio.sleep(until_intended)` alone sends 0.5-1 ms late and breaks the 1 ms p99 send-lag
rule. Two ways to be precise are implemented and were measured (bench/loadgen_send_lag.py; 2-core AMD EPYC VM,
uvloop, the ORT server on the same host, tiny MLP, Poisson, 8 s per run):

* "thread": a timer thread sleeps with time.sleep (clock_nanosleep, ~60 µs slack) until each intended
  time and hands the request to the loop with call_soon_threadsafe; the GIL switch interval is lowered
  to 100 µs for the run so the thread gets the GIL promptly.
* "yield": the loop sleeps until ~1.2 ms before the intended time, then yields with `asyncio.sleep(0)`
  (still serving responses) until the clock passes it. Precise, but it spins: at 500 req/s the loop
  burns about half a core polling, which counts against the generator's CPU share and takes CPU the
  server could use on a small host. On Linux the loop now waits on a timerfd (absolute CLOCK_MONOTONIC
  deadline, microsecond wake-ups) until TIMERFD_SPIN_NS before the intended time and yields only that last
  stretch, which removed most of the polling (bench/loadgen.py, 1000 req/s: 788 -> 251 µs CPU per request).
  The figures below predate that change.

For http:// URLs the open loop sends through follower.loadgen.transports.rawhttp (a minimal keep-alive HTTP/1.1 client on
asyncio Protocols) instead of aiohttp, which spent most of the rest of the CPU per request; the four timestamps,
status, stage timings and error accounting are the same (first byte = the answer's first bytes arriving). The
dispatcher writes each raw request itself and answers arrive through callbacks (no task per request): the hop from
dispatcher to task was measured at p99 0.65-12 ms of send lag at 2000-5000 req/s, and is 0.01-0.02 ms now.

Where send lag comes from on a shared VM (bench/send_lag_causes.py): not GC (no collection runs while requests are
due: the collector is off for the run), not the timer (the timerfd + 150 µs spin; 50 µs and 500 µs were both
worse), but the generator thread waiting for its core behind other processes (14-64% of a run at nice -10, which
session autogroups make useless against other sessions) and hypervisor steal. follower.host.cpuplan therefore runs the
generator thread under SCHED_FIFO where permitted; what remains above 1 ms p99 tracks the steal share of the run.

Measured (ms, send lag p50 / p99 / max, generator CPU share; two 8 s Poisson runs each; bench/loadgen_send_lag.py):

    200 req/s  thread  0.21-0.24 / 2.5-3.7 / 5.5-15   13-15%      yield  0.044-0.048 / 1.6-2.6 / 3.2-9.1  27-29%
    500 req/s  thread  0.26-0.27 / 3.1-4.1 / 11-14    29-31%      yield  0.043-0.046 / 2.9-5.8 / 18-22    54%

Neither meets p99 < 1 ms on that VM, and no generator design can: a bare Python busy loop there sees the vCPU
stalled by the host ~160 times in 5 s (18 stalls > 1 ms, up to 10 ms, ~1.8% of the time; time.sleep overshoots
0.15 ms at p50 and 1.1 ms at p99 on an idle machine). The verdict then rightly marks such points invalid.
"yield" is the default: its median lag is 5x lower (the part the generator controls) and its tail no worse;
it costs CPU while it spins, which the CPU-share rule reports honestly. "thread" suits high rates on small
hosts where the spinning would take the server's core.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import ctypes
import gc
import os
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

import aiohttp
import numpy as np
import orjson

from follower.loadgen.transports.rawhttp import RawHttpSession, expire

Timer = Literal["thread", "yield"]
TIMERS: tuple[str, ...] = ("thread", "yield")

# The "yield" timer hands over from asyncio's coarse sleep to busy yielding this long before the intended time:
# a little over one millisecond covers the timer's rounding.
YIELD_SPIN_NS = 1_200_000
# With a timerfd, the "yield" timer wakes this long before the intended time and yields the rest: waking an idle
# vCPU takes ~0.15 ms on our VMs, so waking exactly on time sends 0.15 ms late at the median.
TIMERFD_SPIN_NS = 150_000
# The loop-lag ticker's period: 10 ms, a common responsiveness probe interval.
TICK_NS = 10_000_000
# Lowered GIL switch interval while the timer thread runs: a thread waiting for the GIL waits at most this.
SWITCH_INTERVAL_S = 100e-6
# How far in the future the first request is scheduled, so the timer thread and ticker are running before it.
DEFAULT_LEAD_NS = 50_000_000

STAGES = ("queue_ns", "infer_ns", "decode_ns", "encode_ns", "preprocess_ns", "postprocess_ns")
# Stages only a server running processors reports (data.processing: server); -1 elsewhere, which means "none ran".
OPTIONAL_STAGES = ("preprocess_ns", "postprocess_ns")
_PARAMS_KEY = b'"parameters":'
_HEADERS = {"Content-Type": "application/json"}

# Status codes beside HTTP ones: never sent (stopped before its time), failed without an HTTP answer, and
# dropped because max_concurrency requests were in flight at its time (cap_policy "drop").
NOT_SENT = -1
TRANSPORT_ERROR = 0
DROPPED = -2

CapPolicy = Literal["wait", "drop"]
# Called on the loop every tick with the records so far and the time; returning True ends the run there.
TickCallback = Callable[["LoadRecords", int], bool]


@dataclass
class LoadRecords:
    """A run as a structure of arrays, one entry per scheduled request (absolute monotonic ns; -1 = did not happen)."""

    intended_ns: np.ndarray
    sent_ns: np.ndarray
    first_byte_ns: np.ndarray
    done_ns: np.ndarray
    status: np.ndarray  # HTTP status, TRANSPORT_ERROR (0) or NOT_SENT (-1)
    stages_ns: dict[str, np.ndarray]  # server stage timings from "parameters"; -1 where absent
    start_ns: int
    cpu_s: float = 0.0
    wall_s: float = 0.0
    loop_lag_ns: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    error_sample: str | None = None
    timer: str = "yield"
    # Requests that found max_concurrency in flight at their time: they waited (counted as latency from the
    # intended time, and as send lag) or were dropped (status DROPPED). Never hidden.
    capped: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    stopped_ns: int | None = None  # when a tick callback ended the run early
    # Share of the run the generator thread was runnable but waiting for its core (None: not measured here).
    run_queue_share: float | None = None
    # The generator thread's scheduling ("fifo", or "nice N (SCHED_FIFO refused: why)"); None: not set here.
    scheduling: str | None = None

    @classmethod
    def allocate(cls, start_ns: int, offsets_ns: np.ndarray, timer: str = "yield") -> LoadRecords:
        """Empty records for a schedule: intended times filled, everything else -1."""
        n = len(offsets_ns)

        def blank() -> np.ndarray:
            return np.full(n, -1, dtype=np.int64)

        return cls(
            intended_ns=start_ns + np.asarray(offsets_ns, dtype=np.int64),
            sent_ns=blank(),
            first_byte_ns=blank(),
            done_ns=blank(),
            status=np.full(n, NOT_SENT, dtype=np.int32),
            stages_ns={stage: blank() for stage in STAGES},
            start_ns=start_ns,
            timer=timer,
            capped=np.zeros(n, dtype=bool),
        )

    def __len__(self) -> int:
        return len(self.intended_ns)

    @property
    def ok(self) -> np.ndarray:
        """Mask of requests answered 200."""
        return self.status == 200

    @property
    def sent(self) -> np.ndarray:
        """Mask of requests that were handed to the HTTP client."""
        return self.sent_ns >= 0

    @property
    def cpu_share(self) -> float:
        """The generator process's CPU time over the run's wall time (1.0 = one core busy)."""
        return self.cpu_s / self.wall_s if self.wall_s > 0 else 0.0

    def window(self, start_ns: int, end_ns: int) -> LoadRecords:
        """The requests whose *intended* time falls in [start_ns, end_ns); run-level figures are kept."""
        mask = (self.intended_ns >= start_ns) & (self.intended_ns < end_ns)
        return LoadRecords(
            intended_ns=self.intended_ns[mask],
            sent_ns=self.sent_ns[mask],
            first_byte_ns=self.first_byte_ns[mask],
            done_ns=self.done_ns[mask],
            status=self.status[mask],
            stages_ns={k: v[mask] for k, v in self.stages_ns.items()},
            start_ns=start_ns,
            cpu_s=self.cpu_s,
            wall_s=self.wall_s,
            loop_lag_ns=self.loop_lag_ns,
            error_sample=self.error_sample,
            timer=self.timer,
            capped=self.capped[mask] if len(self.capped) == len(mask) else np.zeros(int(mask.sum()), dtype=bool),
            stopped_ns=self.stopped_ns,
            run_queue_share=self.run_queue_share,
            scheduling=self.scheduling,
        )


def parse_stage_timings(payload: bytes) -> dict[str, int] | None:
    """The "parameters" object of a KServe v2 answer, parsing only the tail when it is last (benchfleet's server)."""
    at = payload.rfind(_PARAMS_KEY)
    if at < 0:
        return None
    try:
        # Cheap path: our server writes "parameters" last, so the tensors need not be parsed on the client.
        params = orjson.loads(payload[at + len(_PARAMS_KEY) : -1])
    except orjson.JSONDecodeError:
        try:
            params = orjson.loads(payload).get("parameters")
        except (orjson.JSONDecodeError, AttributeError):
            return None
    return params if isinstance(params, dict) else None


class _TimerFd:
    """A Linux timerfd on CLOCK_MONOTONIC (the clock of time.monotonic_ns), armed at absolute ns deadlines.

    The event loop watches it like a socket, so the loop wakes at the intended time to the microsecond instead of
    polling with sleep(0) for the last ~1.2 ms before every request (which burnt most of the generator's CPU).
    """

    class _Spec(ctypes.Structure):
        _fields_ = [("interval_s", ctypes.c_long), ("interval_ns", ctypes.c_long),
                    ("value_s", ctypes.c_long), ("value_ns", ctypes.c_long)]  # fmt: skip

    _libc: ctypes.CDLL | None = None

    def __init__(self) -> None:
        if _TimerFd._libc is None:
            _TimerFd._libc = ctypes.CDLL(None, use_errno=True)
        self._settime = _TimerFd._libc.timerfd_settime
        # CLOCK_MONOTONIC = 1, TFD_NONBLOCK | TFD_CLOEXEC
        self.fd = _TimerFd._libc.timerfd_create(1, os.O_NONBLOCK | os.O_CLOEXEC)
        if self.fd < 0:
            raise OSError(ctypes.get_errno(), "timerfd_create")
        self._spec = self._Spec(0, 0, 0, 0)
        self._ref = ctypes.byref(self._spec)

    @classmethod
    def create(cls) -> _TimerFd | None:
        """A timerfd, or None where the platform has none (the dispatcher then spins with sleep(0))."""
        if not sys.platform.startswith("linux"):
            return None
        try:
            return cls()
        except (OSError, AttributeError):
            return None

    def arm(self, deadline_ns: int) -> None:
        spec = self._spec
        spec.value_s, spec.value_ns = divmod(max(deadline_ns, 1), 1_000_000_000)
        if self._settime(self.fd, 1, self._ref, None) != 0:  # TFD_TIMER_ABSTIME = 1
            raise OSError(ctypes.get_errno(), "timerfd_settime")

    def clear(self) -> None:
        with contextlib.suppress(BlockingIOError):
            os.read(self.fd, 8)

    def close(self) -> None:
        os.close(self.fd)


class _Driver:
    """One run's state; methods run on the event loop except _timer_thread."""

    def __init__(
        self,
        url: str,
        bodies: Sequence[bytes],
        records: LoadRecords,
        session: aiohttp.ClientSession | RawHttpSession,
        stop: threading.Event,
        max_concurrency: int = 256,
        cap_policy: CapPolicy = "wait",
        body_index: np.ndarray | None = None,
    ) -> None:
        self.url = url
        self.cap = asyncio.Semaphore(max_concurrency)
        self.cap_policy = cap_policy
        self.bodies = list(bodies)
        self.rec = records
        self.session = session
        # The raw client takes each body's full request bytes, built once here.
        self.wires = [session.wire(b) for b in self.bodies] if isinstance(session, RawHttpSession) else None
        # Request i sends bodies[pick[i]] (a trace's per-request input) or, by default, bodies[i % len(bodies)].
        n = len(self.bodies)
        self.pick: list[int] = body_index.tolist() if body_index is not None else [i % n for i in range(len(records))]
        # Raw HTTP: requests are written by the dispatcher itself and answered through callbacks (no task per
        # request), with the in-flight cap kept here: bench/send_lag_causes.py measured the dispatcher -> task hop at
        # p99 0.65 ms (2000 req/s) to 8.6 ms (5000 req/s) of send lag on a 2-core VM.
        self.max_concurrency = max_concurrency
        self.in_flight = 0
        self.waiting: collections.deque[int] = collections.deque()  # capped requests (policy wait), in order
        self.pending: set[_Pending] = set()
        self.drained = asyncio.Event()
        self.timeout_s = session.timeout_s if isinstance(session, RawHttpSession) else 30.0
        self.stop = stop
        self.tasks: set[asyncio.Task[None]] = set()
        self.loop = asyncio.get_running_loop()
        self.dispatched = asyncio.Event()
        self.lags: list[int] = []
        # Plain lists of ints shared with arrays would be slower to fill; write straight into numpy per request.
        self._intended = records.intended_ns.tolist()

    def launch(self, i: int) -> None:
        """Start request i now (called on the loop)."""
        if self.wires is not None:
            if self.in_flight >= self.max_concurrency:
                self.rec.capped[i] = True
                if self.cap_policy == "drop":
                    self.rec.status[i] = DROPPED
                else:
                    self.waiting.append(i)  # sent when a request ahead of it is answered; its wait is send lag
                return
            self.send_raw(i)
            return
        if self.cap.locked():
            self.rec.capped[i] = True
            if self.cap_policy == "drop":
                self.rec.status[i] = DROPPED
                return
        task = self.loop.create_task(self.request(i))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def request(self, i: int) -> None:
        async with self.cap:
            await self._request(i)

    def send_raw(self, i: int) -> None:
        """Write request i on an idle connection now, or open one in a task; the answer comes to answered()/failed()."""
        self.in_flight += 1
        pending = _Pending(self, i)
        self.pending.add(pending)
        wire = self.wires[self.pick[i]]  # type: ignore[index]
        self.rec.sent_ns[i] = time.monotonic_ns()
        try:
            conn = self.session.send_now(wire, pending)  # type: ignore[union-attr]
        except OSError as exc:
            pending.set_exception(exc)
            return
        if conn is None:
            task = self.loop.create_task(self._connect_send(pending, wire))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)
        else:
            pending.timer = self.loop.call_later(self.timeout_s, expire, conn, pending, self.timeout_s)

    async def _connect_send(self, pending: _Pending, wire: bytes) -> None:
        try:
            conn = await self.session.connect_and_send(wire, pending)  # type: ignore[union-attr]
        except (TimeoutError, OSError) as exc:
            pending.set_exception(exc)
            return
        if not pending.finished:
            pending.timer = self.loop.call_later(self.timeout_s, expire, conn, pending, self.timeout_s)

    def answered(self, pending: _Pending, status: int, first_ns: int, payload: bytes) -> None:
        """Record an answer (called from the connection's data_received)."""
        rec, i = self.rec, pending.i
        rec.done_ns[i] = time.monotonic_ns()
        rec.first_byte_ns[i] = first_ns
        rec.status[i] = status
        if status == 200:
            params = parse_stage_timings(payload)
            if params:
                stages = rec.stages_ns
                for stage in STAGES:
                    value = params.get(stage)
                    if isinstance(value, int):
                        stages[stage][i] = value
        elif rec.error_sample is None:
            rec.error_sample = f"HTTP {status}: {payload[:300].decode('utf-8', 'replace')}"
        self._release(pending)

    def failed(self, pending: _Pending, exc: BaseException) -> None:
        """Record a request that got no HTTP answer (refused, reset, malformed, timed out)."""
        rec, i = self.rec, pending.i
        rec.done_ns[i] = time.monotonic_ns()
        rec.status[i] = TRANSPORT_ERROR
        if rec.error_sample is None:
            rec.error_sample = f"{type(exc).__name__}: {exc}"
        self._release(pending)

    def _release(self, pending: _Pending) -> None:
        if pending.timer is not None:
            pending.timer.cancel()
        self.pending.discard(pending)
        self.in_flight -= 1
        if self.waiting and not self.stop.is_set():
            self.send_raw(self.waiting.popleft())
        elif not self.in_flight and self.dispatched.is_set():
            self.drained.set()

    async def drain(self, timeout_s: float) -> None:
        """Wait until every raw request sent has been answered or failed (at most `timeout_s`)."""
        if self.in_flight or self.waiting:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.drained.wait(), timeout_s)

    def abandon(self) -> None:
        """The run is over: raw requests still unanswered are errors (their connections are closed with the session)."""
        for pending in list(self.pending):
            pending.finished = True
            if pending.timer is not None:
                pending.timer.cancel()
            self.rec.status[pending.i] = TRANSPORT_ERROR
            if self.rec.error_sample is None:
                self.rec.error_sample = "request still unanswered when the run ended (cancelled)"
        self.pending.clear()
        self.waiting.clear()

    async def _request(self, i: int) -> None:
        rec = self.rec
        body = self.bodies[self.pick[i]]
        rec.sent_ns[i] = time.monotonic_ns()
        try:
            async with self.session.post(self.url, data=body, headers=_HEADERS) as response:
                rec.first_byte_ns[i] = time.monotonic_ns()
                payload = await response.read()
                rec.done_ns[i] = time.monotonic_ns()
                rec.status[i] = response.status
            if response.status == 200:
                params = parse_stage_timings(payload)
                if params:
                    for stage in STAGES:
                        value = params.get(stage)
                        if isinstance(value, int):
                            rec.stages_ns[stage][i] = value
            elif rec.error_sample is None:
                rec.error_sample = f"HTTP {response.status}: {payload[:300].decode('utf-8', 'replace')}"
        except asyncio.CancelledError:
            rec.status[i] = TRANSPORT_ERROR
            if rec.error_sample is None:
                rec.error_sample = "request still unanswered when the run ended (cancelled)"
            raise
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            rec.done_ns[i] = time.monotonic_ns()
            rec.status[i] = TRANSPORT_ERROR
            if rec.error_sample is None:
                rec.error_sample = f"{type(exc).__name__}: {exc}"

    # -- timers ------------------------------------------------------------------------------------------------

    def timer_thread(self) -> None:
        """Sleep precisely until each intended time and hand the request to the loop."""
        call = self.loop.call_soon_threadsafe
        for i, target in enumerate(self._intended):
            while True:
                delay = target - time.monotonic_ns()
                if delay <= 0:
                    break
                if self.stop.is_set():
                    call(self.dispatched.set)
                    return
                # Bounded sleeps so a stop request is noticed within 50 ms even in sparse schedules.
                time.sleep(min(delay, 50_000_000) / 1e9)
            if self.stop.is_set():
                break
            call(self.launch, i)
        call(self.dispatched.set)

    async def yield_dispatch(self) -> None:
        """Dispatch on the loop: wake on a timerfd at each intended time, or (no timerfd) spin-yield; send."""
        tfd = _TimerFd.create()
        if tfd is None:
            await self._spin_dispatch()
            return
        loop = self.loop
        wake: list[asyncio.Future[None] | None] = [None]

        def ready() -> None:
            tfd.clear()
            fut = wake[0]
            if fut is not None and not fut.done():
                fut.set_result(None)

        loop.add_reader(tfd.fd, ready)
        intended, launch, stop = self._intended, self.launch, self.stop
        n, i = len(intended), 0
        try:
            while i < n:
                now = time.monotonic_ns()
                while i < n and intended[i] <= now:  # every request whose time has come, in order
                    if stop.is_set():
                        return
                    launch(i)
                    i += 1
                if i >= n:
                    break
                target = intended[i]
                if target - now > TIMERFD_SPIN_NS:
                    wake[0] = fut = loop.create_future()
                    tfd.arm(target - TIMERFD_SPIN_NS)
                    await fut
                while time.monotonic_ns() < target:  # the last stretch: the vCPU's wake-up from idle is ~0.15 ms
                    await asyncio.sleep(0)
                if stop.is_set():
                    return
        finally:
            loop.remove_reader(tfd.fd)
            tfd.close()
            self.dispatched.set()

    async def _spin_dispatch(self) -> None:
        """Coarse asyncio sleep, then yield to the loop until the intended time passes; send."""
        for i, target in enumerate(self._intended):
            delay = target - time.monotonic_ns()
            if delay > YIELD_SPIN_NS:
                await asyncio.sleep((delay - YIELD_SPIN_NS) / 1e9)
            while time.monotonic_ns() < target:
                await asyncio.sleep(0)
            if self.stop.is_set():
                break
            self.launch(i)
        self.dispatched.set()

    async def ticker(self, on_tick: TickCallback | None = None, every_ns: int = 1_000_000_000) -> None:
        """Event-loop lag: how late a 10 ms periodic sleep wakes (includes asyncio's ~1 ms timer rounding).

        Every `every_ns` it also calls `on_tick` (windows, stability, live progress); True from it stops the run.
        """
        due = time.monotonic_ns() + TICK_NS
        next_call = self.rec.start_ns + every_ns
        while True:
            await asyncio.sleep(max(0, due - time.monotonic_ns()) / 1e9)
            now = time.monotonic_ns()
            self.lags.append(now - due)
            due = max(due + TICK_NS, now + 1)
            if on_tick is not None and now >= next_call:
                next_call += every_ns
                if on_tick(self.rec, now) and not self.stop.is_set():
                    self.rec.stopped_ns = now
                    self.stop.set()
                    self.dispatched.set()


async def run_open_loop(
    url: str,
    bodies: Sequence[bytes],
    offsets_ns: np.ndarray,
    start_ns: int,
    *,
    session: aiohttp.ClientSession | RawHttpSession | None = None,
    max_concurrency: int = 256,
    timeout_s: float = 30.0,
    timer: Timer = "yield",
    stop: threading.Event | None = None,
    cap_policy: CapPolicy = "wait",
    on_tick: TickCallback | None = None,
    tick_every_ns: int = 1_000_000_000,
    body_index: np.ndarray | None = None,
) -> LoadRecords:
    """POST bodies[i % len] (or bodies[body_index[i]]) to `url` at start_ns + offsets_ns[i] (monotonic ns); record all."""
    if not bodies:
        raise ValueError("need at least one request body")
    if body_index is not None and (len(body_index) != len(offsets_ns) or (len(body_index) and (
            int(body_index.min()) < 0 or int(body_index.max()) >= len(bodies)))):  # fmt: skip
        raise ValueError("body_index must give each request an index into bodies")
    if timer not in TIMERS:
        raise ValueError(f"unknown timer {timer!r}; known: {', '.join(TIMERS)}")
    stop = stop or threading.Event()
    rec = LoadRecords.allocate(start_ns, offsets_ns, timer)
    own_session = session is None
    if session is None:
        session = _open_loop_session(max_concurrency, timeout_s, url)
    driver = _Driver(url, bodies, rec, session, stop, max_concurrency, cap_policy, body_index)
    ticker = asyncio.get_running_loop().create_task(driver.ticker(on_tick, tick_every_ns))
    thread: threading.Thread | None = None
    dispatcher: asyncio.Task[None] | None = None
    old_switch = sys.getswitchinterval()
    cpu0, wall0 = time.process_time_ns(), time.monotonic_ns()
    # Collections of the many short-lived aiohttp objects would pause the loop mid-run; the arrays make no
    # garbage, so defer the collector until the run is over.
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        if timer == "thread":
            sys.setswitchinterval(SWITCH_INTERVAL_S)
            thread = threading.Thread(target=driver.timer_thread, name="loadgen-timer", daemon=True)
            thread.start()
        else:
            dispatcher = asyncio.get_running_loop().create_task(driver.yield_dispatch())
        await driver.dispatched.wait()
        if driver.wires is not None:
            # A backstop only: each raw request has its own timeout (after a connect bounded by the same), so a
            # request is recorded as timed out rather than abandoned by this wait.
            await driver.drain(2 * timeout_s + 1.0)
        elif driver.tasks:
            await asyncio.wait(set(driver.tasks), timeout=timeout_s)
    finally:
        stop.set()  # ends the timer thread / dispatcher if we got here by cancellation or error
        sys.setswitchinterval(old_switch)
        ticker.cancel()
        if dispatcher is not None:
            dispatcher.cancel()
        driver.abandon()
        for task in list(driver.tasks):
            task.cancel()
        pending = [t for t in (ticker, dispatcher, *driver.tasks) if t is not None]
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(*pending, return_exceptions=True)
        if thread is not None:
            thread.join(timeout=1.0)
        rec.cpu_s = (time.process_time_ns() - cpu0) / 1e9
        rec.wall_s = (time.monotonic_ns() - wall0) / 1e9
        rec.loop_lag_ns = np.asarray(driver.lags, dtype=np.int64)
        if own_session:
            await session.close()
        if gc_was_enabled:
            gc.enable()
    return rec


class _Pending:
    """One raw request awaiting its answer: the future-like waiter RawHttpSession completes, without a task."""

    __slots__ = ("driver", "i", "timer", "finished")

    def __init__(self, driver: _Driver, i: int) -> None:
        self.driver, self.i = driver, i
        self.timer: asyncio.TimerHandle | None = None
        self.finished = False

    def done(self) -> bool:
        return self.finished

    def set_result(self, result: tuple[int, int, bytes]) -> None:
        if not self.finished:
            self.finished = True
            self.driver.answered(self, *result)

    def set_exception(self, exc: BaseException) -> None:
        if not self.finished:
            self.finished = True
            self.driver.failed(self, exc)


def new_session(max_concurrency: int, timeout_s: float = 30.0, url: str | None = None) -> aiohttp.ClientSession:
    """An aiohttp session whose pool holds at most `max_concurrency` connections (waiters still count as late).

    For a grpc:// `url` it is a follower.loadgen.transports.grpc_client.GrpcSession instead: the same post/close interface.
    """
    if url is not None and url.startswith("grpc://"):
        from follower.loadgen.transports.grpc_client import GrpcSession

        return GrpcSession(max_concurrency, timeout_s)  # type: ignore[return-value]
    connector = aiohttp.TCPConnector(limit=max_concurrency, limit_per_host=max_concurrency, force_close=False)
    return aiohttp.ClientSession(
        connector=connector,
        timeout=aiohttp.ClientTimeout(total=timeout_s),
        # Nothing of ours needs cookies or redirects; skipping them saves per-request work.
        cookie_jar=aiohttp.DummyCookieJar(),
        auto_decompress=False,
        skip_auto_headers=("User-Agent",),
    )


def _open_loop_session(max_concurrency: int, timeout_s: float, url: str) -> aiohttp.ClientSession | RawHttpSession:
    """The open loop's client: the raw keep-alive client for http:// (a fraction of aiohttp's CPU per request)."""
    if url.startswith("http://"):
        return RawHttpSession(url, timeout_s)
    return new_session(max_concurrency, timeout_s, url)


def drive(
    url: str,
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
) -> LoadRecords:
    """Run a schedule to completion on a fresh uvloop loop in the calling thread (run it via asyncio.to_thread).

    `start_ns` (absolute monotonic ns) lets several generator processes share one start: CLOCK_MONOTONIC is
    system-wide on Linux. By default the run starts `lead_ns` from now.
    """
    import uvloop

    async def main() -> LoadRecords:
        async with _open_loop_session(max_concurrency, timeout_s, url) as session:
            return await run_open_loop(
                url,
                bodies,
                offsets_ns,
                start_ns if start_ns is not None else time.monotonic_ns() + lead_ns,
                session=session,
                max_concurrency=max_concurrency,
                timeout_s=timeout_s,
                timer=timer,
                stop=stop,
                cap_policy=cap_policy,
                on_tick=on_tick,
                tick_every_ns=tick_every_ns,
                body_index=body_index,
            )

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(main())
