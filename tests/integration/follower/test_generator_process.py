"""The load generator runs in a process of its own (follower/loadgen/apart.py), not in a thread of the agent: its
windows still reach the agent live, a cancellation still ends it, a generator process that dies fails the point and
the next point gets a fresh one, points driven at once get a process each, and a closed loop runs there too."""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from common.procs import SupervisedProcess, free_port, http_ready
from common.wire.records import NOT_SENT
from common.wire.results import WindowStat
from follower.loadgen.apart import ClosedLoopRun, GeneratorDied, Generators, OpenLoopRun, Watch
from follower.loadgen.schedule import arrival_offsets_ns
from follower.protocols import Endpoint

pytestmark = pytest.mark.integration

SERVER = Path(__file__).with_name("capacity_server.py")


@pytest.fixture(scope="module")
def endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Endpoint]:
    port = free_port()
    argv = [sys.executable, str(SERVER), "--port", str(port), "--service-ms", "2", "--workers", "0"]
    log = tmp_path_factory.mktemp("server") / "server.log"
    with SupervisedProcess(argv, name="parallel 2 ms server", log_path=log) as proc:
        proc.wait_ready(http_ready(f"http://127.0.0.1:{port}/ready"), timeout_s=30)
        yield Endpoint("kserve-http", f"http://127.0.0.1:{port}", "m")


def _run(endpoint: Endpoint, rate: float, seconds: float, *, watch: Watch | None = None) -> OpenLoopRun:
    offsets = arrival_offsets_ns("poisson", rate, seconds, seed=3)
    return OpenLoopRun(endpoint, [b'{"inputs": []}'], offsets, max_concurrency=64, timeout_s=10, watch=watch)


def _generator_pids() -> set[int]:
    return {p.pid for p in multiprocessing.active_children() if p.name == "benchfleet-generator" and p.pid is not None}


def test_a_point_runs_in_the_generator_process_and_its_windows_reach_the_agent_live(endpoint: Endpoint) -> None:
    generators = Generators()
    seen: list[tuple[int, set[int]]] = []  # (windows so far, generator processes alive) at each publish

    def publish(windows: list[WindowStat]) -> None:
        seen.append((len(windows), _generator_pids()))

    try:
        watch = Watch(warmup_ns=0, window_ns=500_000_000, min_ns=3_000_000_000)
        first = generators.run(_run(endpoint, 100, 3.0, watch=watch), threading.Event(), publish)
        pids = _generator_pids()
        second = generators.run(_run(endpoint, 100, 1.0), threading.Event())
        assert _generator_pids() == pids  # the attempt's process served its next point too
    finally:
        generators.close()
    assert len(pids) == 1 and os.getpid() not in pids
    assert not _generator_pids()  # closed with the attempt
    # Windows were published while the point ran, one more each time, from the generator process.
    assert len(seen) >= 3 and [n for n, _ in seen] == sorted(n for n, _ in seen), seen
    assert all(alive == pids for _, alive in seen), (seen, pids)
    for ran in (first, second):
        records = ran.records
        assert ran.stopped_ns is None and int(records.ok.sum()) == len(records) > 50
        assert records.cpu_s is not None and records.cpu_s > 0  # the generator process's own CPU, no agent thread's


def test_a_cancellation_ends_the_point_in_the_generator_process(endpoint: Endpoint) -> None:
    generators, stop = Generators(), threading.Event()
    generators.prepare()  # started, so the second before the cancellation is the point's
    timer = threading.Timer(1.0, stop.set)
    timer.start()
    try:
        ran = generators.run(_run(endpoint, 100, 30.0), stop)
    finally:
        timer.cancel()
        generators.close()
    records = ran.records
    # About a second of a 30 s schedule was sent; the rest never was.
    sent = int((records.status != NOT_SENT).sum())
    assert 0 < sent < 0.5 * len(records), (sent, len(records))
    assert np.all(records.status[records.intended_ns > records.start_ns + 10 * 10**9] == NOT_SENT)


def test_a_generator_process_that_dies_fails_its_point_and_the_next_point_gets_a_new_one(endpoint: Endpoint) -> None:
    generators = Generators()

    def kill_when_running() -> None:
        while not (pids := _generator_pids()):
            threading.Event().wait(0.05)
        threading.Event().wait(0.5)
        for pid in pids:
            os.kill(pid, signal.SIGKILL)

    generators.prepare()  # started: the kill lands in the point, not in the process's start
    killer = threading.Thread(target=kill_when_running)
    killer.start()
    try:
        with pytest.raises(GeneratorDied, match="ended"):
            generators.run(_run(endpoint, 100, 20.0), threading.Event())
        killer.join()
        ran = generators.run(_run(endpoint, 100, 1.0), threading.Event())
    finally:
        generators.close()
    assert int(ran.records.ok.sum()) == len(ran.records) > 50


def test_points_driven_at_once_get_a_generator_process_each(endpoint: Endpoint) -> None:
    generators = Generators()
    during: list[set[int]] = []  # the generator processes alive at each publish of either point
    out: list[int] = []
    watch = Watch(warmup_ns=0, window_ns=500_000_000, min_ns=2_000_000_000)

    def one() -> None:
        ran = generators.run(_run(endpoint, 80, 2.0, watch=watch), threading.Event(), lambda _: during.append(_generator_pids()))
        out.append(int(ran.records.ok.sum()))

    both = [threading.Thread(target=one) for _ in range(2)]
    try:
        for t in both:
            t.start()
        for t in both:
            t.join()
    finally:
        generators.close()
    assert len(out) == 2 and min(out) > 100
    assert during and max(len(alive) for alive in during) == 2, during


def test_a_closed_loop_runs_in_the_generator_process_too(endpoint: Endpoint) -> None:
    generators = Generators()
    try:
        ran = generators.run(ClosedLoopRun(endpoint, [b'{"inputs": []}'], 4, 1_000_000_000, 10), threading.Event())
        pids = _generator_pids()
    finally:
        generators.close()
    assert len(pids) == 1 and os.getpid() not in pids
    records = ran.records
    # 4 users of a 2 ms server for 1 s: each sends its next request as its last is answered.
    assert int(records.ok.sum()) == len(records) > 4 * 100 and ran.stopped_ns is None
    assert records.scheduling is not None and records.cpu_s > 0
