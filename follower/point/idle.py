"""A server's answer time when it has nothing else to do, and waiting until it answers so again: a search's next probe
never starts on a server still working off the previous probe's backlog.

An overloaded probe leaves the server behind its arrivals (a FIFO server at 400 req/s against a capacity of 200 is a
second behind after two); the client stops waiting for it at the point's drain bound, the server does not. Measured
against that backlog, the next probe's latencies are the previous probe's, not its own. So before each probe after the
first, one request at a time (adding no load) is sent until one is answered within IDLE_FACTOR times the idle answer
time measured before the first probe (plus IDLE_SLACK_S); how long that took is reported with the probe. A server
that has not drained within the bound makes the probe invalid (`backlog`), never silently measured.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from common.spec.llm import LlmWorkload
from common.wire.models import ModelMeta
from follower.loadgen.bodies import Samples, build_bodies
from follower.loadgen.llmprompts import PromptMaker, request_body
from follower.protocols import NO_CREDENTIALS, Credentials, Endpoint, protocol_of

IDLE_FACTOR = 3.0  # answered within three times its idle answer time: nothing queued ahead of it
IDLE_SLACK_S = 0.002  # and never asked to be closer to an idle time of a few milliseconds than the host's jitter
REFERENCE_REQUESTS = 5  # the idle time is the median of this many answers, one at a time


def probe(
    model: ModelMeta,
    prompts: PromptMaker | None,
    endpoint: Endpoint,
    batch: int,
    samples: Samples | None = None,
    workload: LlmWorkload | None = None,
) -> tuple[Endpoint, bytes]:
    """One small request the server answers, and where it goes: a short non-streamed prompt to the workload's API
    for a language model, else one body of the model's inputs at the point's batch size."""
    if prompts is not None:
        api = workload.api if workload is not None else "completions"
        asked = LlmWorkload(api=api, stream=False, ignore_eos=False)
        routed = protocol_of(endpoint).route(endpoint, asked)
        return routed, request_body(asked, model.name, prompts.prompt(4, np.random.default_rng(0)), 1)
    return endpoint, build_bodies(model.inputs, batch, seed=0, variants=1, protocol=endpoint.protocol, samples=samples)[0]


@dataclass(frozen=True)
class Drain:
    """How a wait for the server to drain ended."""

    waited_s: float  # from the wait's start to the answer within the idle bound (or to the bound)
    drained: bool  # False: the bound ran out with the server still behind
    idle_s: float  # the idle answer time it was judged against
    last_s: float | None  # the last answer's time (None: the last request got no answer)

    def describe(self) -> str:
        last = "no answer" if self.last_s is None else f"{1e3 * self.last_s:.1f} ms"
        if self.drained:
            return f"drained in {self.waited_s:.1f} s (answered in {last}; idle {1e3 * self.idle_s:.1f} ms)"
        return (
            f"the server was still working off an earlier backlog after {self.waited_s:.1f} s (its last answer took "
            f"{last} against {1e3 * self.idle_s:.1f} ms idle): this probe's latencies would be that backlog's"
        )


class Gauge(Protocol):
    """The search's seam to the server between probes (IdleGauge; the unit tests script one)."""

    async def reference(self) -> float: ...

    async def wait_drained(self, limit_s: float) -> Drain: ...


class IdleGauge:
    """Times single requests against one endpoint, one at a time."""

    def __init__(self, endpoint: Endpoint, body: bytes, timeout_s: float, credentials: Credentials = NO_CREDENTIALS) -> None:
        self.endpoint, self.body, self.timeout_s, self.credentials = endpoint, body, timeout_s, credentials
        self.idle_s: float | None = None

    async def _answers(
        self, n: int, until: float | None = None, within_s: float | None = None
    ) -> tuple[list[float | None], float]:
        """Send up to n requests one after another (stopping at the first answered within `within_s`, or once the
        monotonic time passes `until`); each one's answer time (None: no successful answer), and the time spent."""
        opened = protocol_of(self.endpoint).open_transport(
            self.endpoint, max_concurrency=1, timeout_s=self.timeout_s, raw_http=False, credentials=self.credentials
        )
        times: list[float | None] = []
        began = time.monotonic()
        async with opened as transport:
            encoded = transport.encode(self.body)
            while len(times) < n and (until is None or time.monotonic() < until):
                sent = time.monotonic()
                try:
                    answer = await transport.request(encoded)
                    took: float | None = time.monotonic() - sent if answer.status == 200 else None
                except transport.errors:
                    took = None
                times.append(took)
                if within_s is not None and took is not None and took <= within_s:
                    break
        return times, time.monotonic() - began

    async def reference(self) -> float:
        """The idle answer time: the median of a few answers one at a time (call while nothing else loads the server)."""
        times, _ = await self._answers(REFERENCE_REQUESTS)
        answered = [t for t in times if t is not None]
        if not answered:
            raise RuntimeError(f"the server at {self.endpoint.base} answered none of {len(times)} requests sent one at a time")
        self.idle_s = statistics.median(answered)
        return self.idle_s

    def bound_s(self) -> float:
        """An answer at most this long means nothing was queued ahead of it."""
        assert self.idle_s is not None, "reference() first"
        return max(IDLE_FACTOR * self.idle_s, self.idle_s + IDLE_SLACK_S)

    async def wait_drained(self, limit_s: float) -> Drain:
        """Send one request at a time until one is answered within bound_s(), for at most about `limit_s`."""
        within = self.bound_s()
        times, waited = await self._answers(10**9, until=time.monotonic() + limit_s, within_s=within)
        last = times[-1] if times else None
        assert self.idle_s is not None
        return Drain(waited_s=waited, drained=last is not None and last <= within, idle_s=self.idle_s, last_s=last)
