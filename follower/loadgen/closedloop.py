"""The closed-loop driver: a fixed number of users, each sending its next request when the previous one answers.

A closed loop measures the server at a given concurrency, not at a given arrival rate: there is no schedule, so a
request's intended time is its send time (send lag is zero by construction and the rate is an outcome). Records
come out in the same structure of arrays as the open loop, so windows, histograms and the records blob are shared.
"""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import Sequence

import numpy as np

from follower.loadgen import timing
from follower.loadgen.llmrecords import LlmColumns
from follower.loadgen.records import STAGES, TRANSPORT_ERROR, LoadRecords
from follower.protocols import Endpoint, protocol_of
from follower.protocols.transports import NO_CREDENTIALS, Credentials, Transport
from follower.protocols.transports.base import Stream


async def run_closed_loop(transport: Transport, bodies: Sequence[bytes], concurrency: int, duration_ns: int) -> LoadRecords:
    """`concurrency` users send back-to-back through `transport` for `duration_ns`; every request recorded."""
    if concurrency < 1:
        raise ValueError("concurrency must be >= 1")
    sent: list[int] = []
    first: list[int] = []
    done: list[int] = []
    status: list[int] = []
    stages: dict[str, list[int]] = {s: [] for s in STAGES}
    lags: list[int] = []
    errors: list[str] = []
    picked: list[int] = []
    streams: list[Stream | None] = []
    start_ns = time.monotonic_ns()
    end_ns = start_ns + duration_ns
    counter = iter(range(1 << 62))

    encoded = [transport.encode(b) for b in bodies]

    async def user() -> None:
        while time.monotonic_ns() < end_ns:
            i = next(counter) % len(encoded)
            body = encoded[i]
            t_sent = time.monotonic_ns()
            t_first, t_done, code, params, stream = -1, -1, TRANSPORT_ERROR, None, None
            try:
                answer = await transport.request(body)
                t_first, t_done, code, params = answer.first_ns, answer.done_ns, answer.status, answer.stages
                stream = answer.stream
                if answer.error is not None and not errors:
                    errors.append(answer.error)
            except transport.errors as exc:
                t_done = time.monotonic_ns()
                if not errors:
                    errors.append(f"{type(exc).__name__}: {exc}")
                await asyncio.sleep(0.001)  # a refused connection must not become a hot loop
            sent.append(t_sent)
            first.append(t_first)
            done.append(t_done)
            status.append(code)
            picked.append(i)
            streams.append(stream)
            for stage in STAGES:
                value = params.get(stage) if params else None
                stages[stage].append(value if isinstance(value, int) else -1)

    cpu0 = time.process_time_ns()
    gc_was_enabled = gc.isenabled()
    gc.disable()
    tick = asyncio.get_running_loop().create_task(timing.tick(lags))
    try:
        await asyncio.gather(*(user() for _ in range(concurrency)))
    finally:
        tick.cancel()
        await asyncio.gather(tick, return_exceptions=True)
        if gc_was_enabled:
            gc.enable()
    sent_arr = np.asarray(sent, dtype=np.int64)
    # Users append when answered, so sort by send time: windows cut the records by (sorted) intended time.
    order = np.argsort(sent_arr, kind="stable")
    sent_arr = sent_arr[order]
    llm = None
    if any(s is not None for s in streams):
        llm = LlmColumns.allocate(len(streams))
        for k, i in enumerate(order.tolist()):
            if (stream := streams[i]) is not None:
                llm.add(k, stream)
    return LoadRecords(
        intended_ns=sent_arr.copy(),  # closed loop: a request is due when its user is free
        sent_ns=sent_arr,
        first_byte_ns=np.asarray(first, dtype=np.int64)[order],
        done_ns=np.asarray(done, dtype=np.int64)[order],
        status=np.asarray(status, dtype=np.int32)[order],
        stages_ns={s: np.asarray(v, dtype=np.int64)[order] for s, v in stages.items()},
        start_ns=start_ns,
        cpu_s=(time.process_time_ns() - cpu0) / 1e9,
        wall_s=(time.monotonic_ns() - start_ns) / 1e9,
        loop_lag_ns=np.asarray(lags, dtype=np.int64),
        error_sample=errors[0] if errors else None,
        timer="closed",
        capped=np.zeros(len(sent), dtype=bool),
        llm=llm,
        body=np.asarray(picked, dtype=np.int64)[order],
    )


def drive_closed(
    endpoint: Endpoint,
    bodies: Sequence[bytes],
    concurrency: int,
    duration_ns: int,
    *,
    timeout_s: float = 30.0,
    credentials: Credentials = NO_CREDENTIALS,
) -> LoadRecords:
    """Run a closed loop to completion on a fresh uvloop loop in the calling thread (run it via asyncio.to_thread)."""
    import uvloop

    async def main() -> LoadRecords:
        # aiohttp for HTTP, as the closed loop has always been measured (the raw client serves the open loop).
        opened = protocol_of(endpoint).open_transport(
            endpoint, max_concurrency=concurrency, timeout_s=timeout_s, raw_http=False, credentials=credentials
        )
        async with opened as transport:
            return await run_closed_loop(transport, bodies, concurrency, duration_ns)

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(main())
