"""bench/llm.py's reference for the streaming client's CPU per token event: the same generator, schedule and requests, its
connections reading each streamed token's network read and stamping it, and nothing else (no framing check, no text,
no count). What any client pays per read on this host (the loop's wake-up, the read, the kernel's ACK); what benchfleet
costs above it is its own."""

from __future__ import annotations

import asyncio
import os
import time

import numpy as np
import uvloop

from common.spec.llm import LlmWorkload, TokenLengths
from follower.loadgen.llmprompts import PromptMaker, llm_bodies
from follower.loadgen.openloop import DEFAULT_LEAD_NS, run_open_loop
from follower.loadgen.schedule import arrival_offsets_ns
from follower.protocols.transports.openai_stream import OpenAiStreamTransport, _StreamConn

_clock = time.monotonic_ns


class _BareConn(_StreamConn):
    """A stream under way: each read is one token's time, unread (a read ending the stream goes the usual way)."""

    def data_received(self, data: bytes) -> None:
        if self.steady and not data.endswith(b"0\r\n\r\n"):
            self.events += 1
            self.counted += 1
            self.events_ns.append(_clock())
            return
        super().data_received(data)


class _BareTransport(OpenAiStreamTransport):
    conn_factory = _BareConn


def fake_load(
    maker: PromptMaker, rate: float, duration_s: float, tokens: int, core: int | None
) -> tuple[np.ndarray, list[bytes], np.ndarray | None]:
    """The ceiling's load against the fake server (Poisson at `rate`, 16-token prompts, `tokens` asked), its schedule,
    bodies and body index, for benchfleet's run and the bare reader's alike; the calling thread pinned to `core`."""
    offsets = arrival_offsets_ns("poisson", rate, duration_s, seed=int(rate))
    workload = LlmWorkload(prompt_tokens=TokenLengths(mean=16), output_tokens=TokenLengths(mean=tokens))
    bodies, index, _, _ = llm_bodies(workload, "fake", maker, len(offsets), seed=1)
    if core is not None:
        os.sched_setaffinity(0, {core})
    return offsets, bodies, index


def run_floor(url: str, maker: PromptMaker, rate: float, duration_s: float, tokens: int, core: int | None) -> dict[str, float]:
    """One open-loop run like bench/llm.py's run_ours, through the bare reader: its CPU and token events."""
    offsets, bodies, index = fake_load(maker, rate, duration_s, tokens, core)

    async def main() -> tuple[float, int, int]:
        async with _BareTransport(url, max_concurrency=4096, timeout_s=60) as transport:
            start = time.monotonic_ns() + DEFAULT_LEAD_NS
            rec = await run_open_loop(transport, bodies, offsets, start, max_concurrency=4096, body_index=index, drain_s=30)
        events = sum(len(t) for t in rec.llm.token_times if t is not None) if rec.llm is not None else 0
        return rec.cpu_s, events, int(rec.ok.sum())

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        cpu_s, events, ok = runner.run(main())
    return {"cpu_s": cpu_s, "events": float(events), "ok": float(ok)}
