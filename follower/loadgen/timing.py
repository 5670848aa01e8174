"""When requests leave: the dispatchers that call `launch(i)` at each intended time, and the loop-lag ticker.

Three timers (docs/loadgen/timing.md has the measurements behind them): "yield" waits on a timerfd until just before
the intended time and yields the last stretch on the event loop (the default), that stretch as long as the timerfd's
wake-ups have lately been late (WakeMargin), so it costs CPU only where the host needs it; "busy" does the same with a
fixed BUSY_TAIL_NS stretch (for a generator given a core of its own: the tightest send, the core spinning between
sends); "thread" sleeps in a thread with clock_nanosleep and hands each request to the loop (no spinning).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Literal

Timer = Literal["thread", "yield", "busy"]
TIMERS: tuple[str, ...] = ("thread", "yield", "busy")

# The "yield" timer hands over from asyncio's coarse sleep to busy yielding this long before the intended time:
# a little over one millisecond covers the timer's rounding.
YIELD_SPIN_NS = 1_200_000
# With a timerfd, the "yield" timer wakes a margin before the intended time and yields the rest: the 90th percentile
# of the last MARGIN_WINDOW wake-ups' lateness, between these bounds. Waking an idle vCPU takes ~0.15 ms on our VMs
# without the wake-up latency held (follower/host/wakeup.py); held at 0, the wake-ups are a few µs to tens late, and a
# fixed 0.15 ms margin spent ~60 µs of CPU per request spinning at 4,000 req/s (docs/loadgen/timing.md).
MARGIN_MAX_NS = 150_000
MARGIN_MIN_NS = 20_000
MARGIN_WINDOW = 64
# The "busy" timer's stretch spun before each send, whatever the wake-ups do.
BUSY_TAIL_NS = 250_000
# The loop-lag ticker's period: 10 ms, a common responsiveness probe interval.
TICK_NS = 10_000_000
# Lowered GIL switch interval while the timer thread runs: a thread waiting for the GIL waits at most this.
SWITCH_INTERVAL_S = 100e-6

Launch = Callable[[int], None]


class _TimerFd:
    """A Linux timerfd on CLOCK_MONOTONIC (the clock of time.monotonic_ns), armed at absolute ns deadlines.

    The event loop watches it like a socket, so the loop wakes at the intended time to the microsecond instead of
    polling with sleep(0) for the last ~1.2 ms before every request (which burnt most of the generator's CPU).
    """

    class _Spec(ctypes.Structure):
        _fields_ = [
            ("interval_s", ctypes.c_long),
            ("interval_ns", ctypes.c_long),
            ("value_s", ctypes.c_long),
            ("value_ns", ctypes.c_long),
        ]

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


def dispatch_in_thread(
    loop: asyncio.AbstractEventLoop, intended: list[int], launch: Launch, stop: threading.Event, dispatched: asyncio.Event
) -> None:
    """The "thread" timer (run in its own thread): sleep precisely until each intended time, hand `launch(i)` to the loop."""
    call = loop.call_soon_threadsafe
    for i, target in enumerate(intended):
        while True:
            delay = target - time.monotonic_ns()
            if delay <= 0:
                break
            if stop.is_set():
                call(dispatched.set)
                return
            # Bounded sleeps so a stop request is noticed within 50 ms even in sparse schedules.
            time.sleep(min(delay, 50_000_000) / 1e9)
        if stop.is_set():
            break
        call(launch, i)
    call(dispatched.set)


class WakeMargin:
    """How long before a request's time the timerfd wakes the dispatcher, and how long the dispatcher spun (yielding
    to the loop, so answers are still read and stamped) between the wake-up and the send.

    Adaptive ("yield"): MARGIN_MAX_NS until MARGIN_WINDOW wake-ups were seen, then the 90th percentile of each window's
    lateness (from the armed deadline to the dispatcher running again), within [MARGIN_MIN_NS, MARGIN_MAX_NS]. Fixed
    ("busy"): `fixed_ns` always.
    """

    __slots__ = ("ns", "fixed", "spun_ns", "_late")

    def __init__(self, fixed_ns: int | None = None) -> None:
        self.fixed = fixed_ns is not None
        self.ns = fixed_ns if fixed_ns is not None else MARGIN_MAX_NS
        self.spun_ns = 0  # wall time spent spinning before sends (a core busy without sending)
        self._late: list[int] = []

    def observe(self, late_ns: int) -> None:
        """One wake-up came `late_ns` after its deadline."""
        if self.fixed:
            return
        late = self._late
        late.append(late_ns)
        if len(late) >= MARGIN_WINDOW:
            late.sort()
            self.ns = min(MARGIN_MAX_NS, max(MARGIN_MIN_NS, late[len(late) * 9 // 10]))
            late.clear()


def margin_for(timer: Timer) -> WakeMargin:
    """The wake margin a timer runs with."""
    return WakeMargin(BUSY_TAIL_NS if timer == "busy" else None)


async def dispatch_on_loop(
    intended: list[int], launch: Launch, stop: threading.Event, dispatched: asyncio.Event, margin: WakeMargin | None = None
) -> None:
    """The "yield" and "busy" timers: wake on a timerfd `margin` before each intended time (or, with none, spin-yield),
    then yield on the loop until it comes, and launch."""
    margin = margin or WakeMargin()
    tfd = _TimerFd.create()
    if tfd is None:
        await _spin_dispatch(intended, launch, stop, dispatched)
        return
    loop = asyncio.get_running_loop()
    wake: list[asyncio.Future[None] | None] = [None]

    def ready() -> None:
        tfd.clear()
        fut = wake[0]
        if fut is not None and not fut.done():
            fut.set_result(None)

    loop.add_reader(tfd.fd, ready)
    n, i = len(intended), 0
    clock = time.monotonic_ns
    try:
        while i < n:
            now = clock()
            while i < n and intended[i] <= now:  # every request whose time has come, in order
                if stop.is_set():
                    return
                launch(i)
                i += 1
            if i >= n:
                break
            target = intended[i]
            ahead = margin.ns
            if target - now > ahead:
                wake[0] = fut = loop.create_future()
                deadline = target - ahead
                tfd.arm(deadline)
                await fut
                now = clock()
                margin.observe(now - deadline)
            if now < target:  # the last stretch, yielding so answers are read meanwhile
                began = now
                while now < target:
                    await asyncio.sleep(0)
                    now = clock()
                margin.spun_ns += now - began
            if stop.is_set():
                return
    finally:
        loop.remove_reader(tfd.fd)
        tfd.close()
        dispatched.set()


async def _spin_dispatch(intended: list[int], launch: Launch, stop: threading.Event, dispatched: asyncio.Event) -> None:
    """Coarse asyncio sleep, then yield to the loop until the intended time passes; launch."""
    for i, target in enumerate(intended):
        delay = target - time.monotonic_ns()
        if delay > YIELD_SPIN_NS:
            await asyncio.sleep((delay - YIELD_SPIN_NS) / 1e9)
        while time.monotonic_ns() < target:
            await asyncio.sleep(0)
        if stop.is_set():
            break
        launch(i)
    dispatched.set()


async def tick(
    lags: list[int], on_tick: Callable[[int], None] | None = None, first_call_ns: int = 0, every_ns: int = 1_000_000_000
) -> None:
    """Event-loop lag: how late a 10 ms periodic sleep wakes (includes asyncio's ~1 ms timer rounding), into `lags`.

    From `first_call_ns` on, every `every_ns`, it also calls `on_tick(now)`. Runs until cancelled.
    """
    due = time.monotonic_ns() + TICK_NS
    next_call = first_call_ns
    while True:
        await asyncio.sleep(max(0, due - time.monotonic_ns()) / 1e9)
        now = time.monotonic_ns()
        lags.append(now - due)
        due = max(due + TICK_NS, now + 1)
        if on_tick is not None and now >= next_call:
            next_call += every_ns
            on_tick(now)
