"""The load generator in a process of its own, so no thread of the agent can delay a send or an answer's stamp.

In the agent's process the generator's timing loop shares the interpreter lock with every other thread there: the
heartbeat, the resource and gauge samplers, uploads, the agent's event loop. A thread that holds the lock when a send
is due delays it by up to the interpreter's switch interval (5 ms) or for as long as it runs C code that keeps the
lock (a parse, a validation, a large copy): a late send with no cap involved. In its own process the generator has an
interpreter to itself; what it shares with the agent is only the CPU, and it is pinned to its own core at raised
priority (follower/host/cpuplan.py). `bench/agent_busy.py` measures the difference with the agent's threads busy.

A job attempt keeps its generator processes (Generators): each serves points in turn (started at the first, ended with
the attempt), so a point pays no interpreter start-up and a shard's common start (0.5 s ahead) is not missed; points
driven at once (co-located servers) get a process each. The parent sends each point's run (an open loop's schedule, or
a closed loop's users); the process sends back its live windows as they close (published by the parent) and its
records.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess

import numpy as np

from common.spec.load import Stability
from common.wire.results import WindowStat
from follower.host.cpuplan import isolate_generator_thread, thread_run_queue_ns
from follower.loadgen.cap import CapRule
from follower.loadgen.closedloop import drive_closed
from follower.loadgen.openloop import CapPolicy, drive
from follower.loadgen.records import LoadRecords
from follower.loadgen.sessions import SessionPlan, drive_sessions
from follower.loadgen.timing import Timer
from follower.loadgen.windows import WindowMonitor
from follower.protocols import Endpoint
from follower.protocols.transports.base import NO_CREDENTIALS, Credentials

log = logging.getLogger(__name__)

POLL_S = 0.05  # how often the parent looks for a cancellation while it waits for the point
QUIT_GRACE_S = 5.0
READY_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class Watch:
    """The live windows of a point: they start `warmup_ns` after the run's start, each `window_ns` long; with a
    stability `rule` the run ends once its last windows agree, at least `min_ns` into the measured part."""

    warmup_ns: int
    window_ns: int
    min_ns: int
    rule: Stability | None = None


@dataclass(frozen=True)
class OpenLoopRun:
    """One point's open loop, as the generator process runs it (follower.loadgen.openloop.drive's arguments)."""

    endpoint: Endpoint
    bodies: list[bytes]
    offsets_ns: np.ndarray
    max_concurrency: int
    timeout_s: float
    timer: Timer = "yield"
    cap_policy: CapPolicy = "wait"
    body_index: np.ndarray | None = None
    cap_rule: CapRule | None = None
    drain_s: float | None = None
    credentials: Credentials = NO_CREDENTIALS
    start_ns: int | None = None  # absolute monotonic ns (a shard's common start); None: as soon as it can
    cpus: frozenset[int] | None = None  # the generator's cores
    watch: Watch | None = None


@dataclass(frozen=True)
class ClosedLoopRun:
    """One point's closed loop (follower.loadgen.closedloop.drive_closed's arguments): `users` each send their next
    request as the last is answered, for `duration_ns`."""

    endpoint: Endpoint
    bodies: list[bytes]
    users: int
    duration_ns: int
    timeout_s: float
    credentials: Credentials = NO_CREDENTIALS
    cpus: frozenset[int] | None = None


@dataclass(frozen=True)
class SessionRun:
    """One point's LLM sessions (follower.loadgen.sessions.drive_sessions's arguments)."""

    endpoint: Endpoint
    bodies: list[bytes]
    plan: SessionPlan
    timeout_s: float
    credentials: Credentials = NO_CREDENTIALS
    cpus: frozenset[int] | None = None


PointRun = OpenLoopRun | ClosedLoopRun | SessionRun


@dataclass(frozen=True)
class Ran:
    """A point's records, and when its windows ended it early (their boundary; None: it ran its schedule)."""

    records: LoadRecords
    stopped_ns: int | None


class GeneratorDied(RuntimeError):
    """The generator process ended during a point (killed, or out of memory)."""


def run_point(run: PointRun, stop: threading.Event, publish: Callable[[list[WindowStat]], None] | None) -> Ran:
    """Run one point in the calling thread, on the generator's core at raised priority, then undo both: what the
    generator process does with each point it is sent."""
    undo = isolate_generator_thread(run.cpus)
    if undo.fifo_refused:
        # The operator should know why the generator is not real-time: on a shared host it decides the send lag.
        log.warning("generator thread at %s", undo.describe())
    if isinstance(run, SessionRun):
        try:
            ran = drive_sessions(run.endpoint, run.bodies, run.plan, stop, timeout_s=run.timeout_s, credentials=run.credentials)
            ran.scheduling = undo.describe()
            return Ran(ran, None)
        finally:
            undo()
    if isinstance(run, ClosedLoopRun):
        try:
            closed = drive_closed(
                run.endpoint, run.bodies, run.users, run.duration_ns, timeout_s=run.timeout_s, credentials=run.credentials
            )
            closed.scheduling = undo.describe()
            return Ran(closed, None)
        finally:
            undo()
    waited0, wall0 = thread_run_queue_ns(), time.monotonic_ns()
    monitor: list[WindowMonitor] = []
    watch = run.watch

    def on_tick(rec: LoadRecords, now_ns: int) -> bool:
        if watch is None:
            return False
        if not monitor:  # the windows start from the run's start, which drive() fixes
            origin = rec.start_ns + watch.warmup_ns
            monitor.append(WindowMonitor(origin, watch.window_ns, min_ns=watch.min_ns, rule=watch.rule, publish=publish))
        return monitor[0](rec, now_ns)

    try:
        records = drive(
            run.endpoint,
            run.bodies,
            run.offsets_ns,
            max_concurrency=run.max_concurrency,
            timeout_s=run.timeout_s,
            timer=run.timer,
            stop=stop,
            cap_policy=run.cap_policy,
            on_tick=on_tick if watch is not None else None,
            tick_every_ns=watch.window_ns if watch is not None else 1_000_000_000,
            start_ns=run.start_ns,
            body_index=run.body_index,
            cap_rule=run.cap_rule,
            drain_s=run.drain_s,
            credentials=run.credentials,
        )
        records.scheduling = undo.describe()
        waited1 = thread_run_queue_ns()
        if waited0 is not None and waited1 is not None:
            records.run_queue_share = (waited1 - waited0) / max(time.monotonic_ns() - wall0, 1)
        return Ran(records, monitor[0].stopped_ns if monitor else None)
    finally:
        undo()


def _serve(commands: Connection, results: Connection) -> None:
    """The generator process's main: run each point it is sent, in turn, until told to quit or its parent is gone. A
    listener thread takes the commands, so a cancellation reaches the point while it runs."""
    pending: queue.Queue[tuple[PointRun, threading.Event] | None] = queue.Queue()
    current: list[threading.Event] = [threading.Event()]

    def listen() -> None:
        while True:
            try:
                message = commands.recv()
            except (EOFError, OSError):  # the parent is gone: end the point and the process
                current[0].set()
                pending.put(None)
                return
            if message == "stop":
                current[0].set()
            elif message is None:
                pending.put(None)
                return
            else:
                # Each point's own stop, made as it arrives: a stop sent right behind it (a cancel before the point
                # began, while this process was still starting) reaches that point, not one it had not made yet.
                current[0] = threading.Event()
                pending.put((message, current[0]))

    threading.Thread(target=listen, name="generator-commands", daemon=True).start()
    results.send(("ready", None))  # imported and listening: a point sent now starts at once
    while (item := pending.get()) is not None:
        run, stop = item
        try:
            ran = run_point(run, stop, lambda windows: results.send(("windows", windows)))
            results.send(("done", ran))
        except OSError:  # the parent is gone (its agent stopped): nothing to report to
            return
        except Exception as exc:  # the parent raises it as the point's failure
            with contextlib.suppress(OSError):
                results.send(("error", f"{type(exc).__name__}: {exc}"))


class GeneratorProcess:
    """The generator's own process: started on the first point it runs, reused for the next, ended by
    close(). One point at a time."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._proc: BaseProcess | None = None
        self._commands: Connection | None = None
        self._results: Connection | None = None

    def _start(self) -> tuple[BaseProcess, Connection, Connection]:
        for old in (self._commands, self._results):  # of a process that died
            if old is not None:
                old.close()
        ctx = multiprocessing.get_context("spawn")  # not fork: the agent holds threads and an event loop
        cmd_read, cmd_write = ctx.Pipe(duplex=False)
        res_read, res_write = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=_serve, args=(cmd_read, res_write), name="benchfleet-generator", daemon=True)
        proc.start()
        cmd_read.close()
        res_write.close()
        self._proc, self._commands, self._results = proc, cmd_write, res_read
        # Wait for its interpreter and imports (about a second on a busy host), so a point's start is not spent on them.
        try:
            ready = res_read.poll(READY_TIMEOUT_S) and res_read.recv() == ("ready", None)
        except EOFError:  # it ended while starting
            ready = False
        if not ready:
            proc.kill()
            proc.join()
            self._proc = None
            raise GeneratorDied(f"the generator process did not start (exit code {proc.exitcode})")
        return proc, cmd_write, res_read

    def prepare(self) -> None:
        """Start the process now (before a point whose start is fixed, such as a shard's)."""
        with self._lock:
            if self._proc is None or not self._proc.is_alive():
                self._start()

    def run(self, run: PointRun, stop: threading.Event, publish: Callable[[list[WindowStat]], None] | None = None) -> Ran:
        """Run one point there and wait for its records; `stop` set meanwhile ends it early (cancellation); each time
        windows close, `publish(every window so far)` (best effort: a failure never ends the point)."""
        with self._lock:
            proc, commands, results = (
                (self._proc, self._commands, self._results)
                if self._proc is not None and self._proc.is_alive() and self._commands and self._results
                else self._start()
            )
            commands.send(run)
            stopped = False
            while True:
                if stop.is_set() and not stopped:
                    with contextlib.suppress(OSError):
                        commands.send("stop")
                    stopped = True
                if results.poll(POLL_S):
                    try:
                        kind, payload = results.recv()
                    except EOFError:  # the process is gone
                        proc.join(QUIT_GRACE_S)
                        self._proc = None
                        raise GeneratorDied(f"the generator process ended (exit code {proc.exitcode}) during the point") from None
                    if kind == "windows":
                        if publish is not None:
                            with contextlib.suppress(Exception):
                                publish(payload)
                    elif kind == "done" and isinstance(payload, Ran):
                        return payload
                    else:
                        raise RuntimeError(f"the generator failed: {payload}")
                elif not proc.is_alive():
                    self._proc = None
                    raise GeneratorDied(f"the generator process ended (exit code {proc.exitcode}) during the point")

    def close(self) -> None:
        """End the process (it finishes nothing: call between points)."""
        with self._lock:
            proc, commands, results = self._proc, self._commands, self._results
            self._proc = self._commands = self._results = None
            if proc is not None:
                with contextlib.suppress(OSError):
                    if commands is not None:
                        commands.send(None)
                proc.join(QUIT_GRACE_S)
                if proc.is_alive():
                    proc.kill()
                    proc.join()
            for conn in (commands, results):
                if conn is not None:
                    conn.close()


class Generators:
    """The generator processes of one job attempt: a point takes an idle one (or a new one, when every other is
    driving a point at the same time) and gives it back; close() ends them all."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._idle: list[GeneratorProcess] = []
        self._all: list[GeneratorProcess] = []

    def run(self, run: PointRun, stop: threading.Event, publish: Callable[[list[WindowStat]], None] | None = None) -> Ran:
        """Run one point in a process of its own (GeneratorProcess.run)."""
        with self._lock:
            if self._idle:
                process = self._idle.pop()
            else:
                process = GeneratorProcess()
                self._all.append(process)
        try:
            return process.run(run, stop, publish)
        finally:
            with self._lock:
                self._idle.append(process)

    def prepare(self) -> None:
        """Start one process ahead of the first point (its interpreter start-up is then not in any point's time)."""
        with self._lock:
            if not self._idle:
                process = GeneratorProcess()
                self._all.append(process)
                self._idle.append(process)
            ready = self._idle[-1]
        ready.prepare()

    def close(self) -> None:
        """End every process (between points)."""
        with self._lock:
            every, self._all, self._idle = self._all, [], []
        for process in every:
            process.close()
