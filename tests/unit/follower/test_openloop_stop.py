"""The open-loop driver when its run is stopped (a cancelled point, or one ended early by its windows): requests still
waiting for an in-flight slot are never sent, so nothing waits for them. A cancelled 30 s point used to take 30 s to
stop: the drain waited out its bound (twice the request timeout) for requests it would never send."""

from __future__ import annotations

import asyncio
import threading
import time

import numpy as np

from follower.loadgen.openloop import _Driver
from follower.loadgen.records import TRANSPORT_ERROR, LoadRecords


class HeldTransport:
    """A transport seam that sends nothing and answers nothing: the test answers each request it was handed."""

    timeout_s = 15.0

    def __init__(self) -> None:
        self.begun: list[object] = []

    def encode(self, body: bytes) -> bytes:
        return body

    def begin(self, body: bytes, slot: object) -> None:
        self.begun.append(slot)


def test_a_stopped_run_drains_at_once_leaving_the_capped_requests_unsent() -> None:
    async def run() -> tuple[_Driver, bool]:
        records = LoadRecords.allocate(time.monotonic_ns(), np.zeros(5, dtype=np.int64))
        transport, stop = HeldTransport(), threading.Event()
        driver = _Driver(transport, [b"x"], records, stop, 2, "wait", None)  # type: ignore[arg-type]
        for i in range(5):
            driver.launch(i)
        assert driver.in_flight == 2 and list(driver.waiting) == [2, 3, 4]  # the cap holds three back
        stop.set()  # cancelled, before the dispatcher reported the schedule done
        for slot in transport.begun:
            driver.failed(slot, ConnectionResetError("cancelled"))  # type: ignore[arg-type]
        assert len(transport.begun) == 2  # a stopped run sends none of those waiting
        drained_now = driver.drained.is_set()
        await asyncio.wait_for(driver.drain(2 * transport.timeout_s + 1), timeout=5.0)
        return driver, drained_now

    driver, drained_now = asyncio.run(run())
    assert drained_now and driver.in_flight == 0
    assert driver.rec.status[:2].tolist() == [TRANSPORT_ERROR] * 2 and driver.rec.capped[2:].all()


def test_a_running_run_sends_a_capped_request_when_a_slot_frees() -> None:
    async def run() -> _Driver:
        records = LoadRecords.allocate(time.monotonic_ns(), np.zeros(3, dtype=np.int64))
        transport = HeldTransport()
        driver = _Driver(transport, [b"x"], records, threading.Event(), 1, "wait", None)  # type: ignore[arg-type]
        for i in range(3):
            driver.launch(i)
        driver.failed(transport.begun[0], ConnectionResetError("x"))  # type: ignore[arg-type]
        assert len(transport.begun) == 2 and list(driver.waiting) == [2] and not driver.drained.is_set()
        return driver

    asyncio.run(run())


def test_a_finished_runs_records_format_in_a_line_not_their_arrays() -> None:
    # asyncio.Runner formats its finished task's result while restoring the SIGINT handler: the arrays' own repr of a
    # 1,000-request streamed run took ~0.5 s of CPU after every run.
    from follower.loadgen.llmrecords import LlmColumns

    records = LoadRecords.allocate(10**12, np.arange(100_000, dtype=np.int64) * 1000)
    records.status[:10] = 200
    records.llm = LlmColumns.allocate(len(records))
    records.llm.token_times = [np.arange(64, dtype=np.int64)] * len(records)
    assert repr(records) == "LoadRecords(100000 requests from 1000000000000 ns, 10 answered 200)"
