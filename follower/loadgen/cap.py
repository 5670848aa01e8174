"""The in-flight cap that follows the load: Little's law from the target rate and the latency seen in warm-up, with
room for the bursts a Poisson schedule and a stall bring. A slot costs a connection only when a request uses it, so the
cap is sized for what the point's own schedule can put in flight at once, never below: a request that waits for a slot
is the cap's doing, and a point must be refused for the server's or the host's sake, not the cap's."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from common.stats import quantile
from follower.loadgen.records import LoadRecords

# In flight = rate x time in the system (Little's law); twice that leaves room for the latency to double.
HEADROOM = 2.0
# Requests in flight at rate λ with time T in the system are Poisson(λT) in number (an M/G/∞ count): the cap covers
# the mean, and BURST_SIGMAS standard deviations above it for the bursts a Poisson schedule brings (at 5 σ about one
# request in 3.5 million finds the cap full), so a cap the user did not set does not become a client-side queue.
BURST_SIGMAS = 5.0
# Never fewer slots than this: a handful of slow answers must not throttle a light load.
MIN_CAP = 16
# A stall this long (the generator's host descheduling it, or the server pausing) sends or holds rate x STALL_S
# requests at once. 25 ms: 2.5x the longest host stall measured on the project's 2-core VM (docs/loadgen/timing.md).
# Before, at 4,000 and 8,000 req/s with a 0.1 ms service time, the cap came out at 18 and 51 and a 5-9 ms stall left
# 69-72 requests waiting for it (docs/wire/wire_2core.log); with this room it is 151 and 273.
STALL_S = 0.025


@dataclass(frozen=True)
class CapRule:
    """At `at_ns` after the run's start (the end of warm-up), the cap becomes `decide(records so far, now)`."""

    at_ns: int
    decide: Callable[[LoadRecords, int], int]


def little_cap(records: LoadRecords, now_ns: int, *, rate: float, bound: int) -> int:
    """Slots for `rate` at the time in the system seen so far (p99 of answered requests' send-to-answer time, and the
    age of those still in flight, a lower bound of theirs) with HEADROOM, plus a STALL_S stall's requests, and
    BURST_SIGMAS above that mean; between MIN_CAP and `bound`."""
    sent = records.sent_ns >= 0
    answered = sent & (records.done_ns >= 0)
    waiting = sent & (records.done_ns < 0)
    times = np.concatenate([records.done_ns[answered] - records.sent_ns[answered], now_ns - records.sent_ns[waiting]])
    if not len(times):
        return bound
    in_system_s = quantile(times, 0.99) / 1e9
    mean = rate * (in_system_s * HEADROOM + STALL_S)
    return int(min(bound, max(MIN_CAP, math.ceil(mean + BURST_SIGMAS * math.sqrt(mean)))))
