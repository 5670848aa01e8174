"""Generator scale-out: several generator processes, each driving its own slice of the schedule, merged exactly.

The precomputed schedule is split round-robin (process k sends arrivals k, k+n, k+2n, ...), so each process has
its own deterministic stream (a function of the point's seed and k) and together they send exactly the schedule.
All start at one absolute CLOCK_MONOTONIC time. Merging concatenates the raw per-request arrays and re-sorts them
by intended time, so every summary (and the HDR histograms built from them) equals that of one generator that had
sent everything; the per-process histograms merge to the same counts (common.stats.merge).
"""

from __future__ import annotations

import math
import multiprocessing
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import numpy as np

from common.wire.results import GeneratorPlan
from follower.host.cpuplan import isolate_generator_thread
from follower.loadgen.llmrecords import LlmColumns
from follower.loadgen.openloop import drive
from follower.loadgen.records import LoadRecords
from follower.protocols import Endpoint

# Per-request generator CPU before anything is measured on this host (aiohttp + uvloop on one core, DESIGN.md).
DEFAULT_CPU_PER_REQUEST_S = 140e-6
# CPU per token event of a streamed answer before anything is measured (the streaming transport on one core of a
# 2-vCPU VM: 9-15 us at 30,000-45,000 events/s in bench/llm.py; the prior errs high).
DEFAULT_CPU_PER_TOKEN_EVENT_S = 20e-6
# Plan for each generator process to use at most this share of its core, leaving headroom for bursts.
TARGET_CPU_SHARE = 0.5
# Spawning a process and importing numpy/aiohttp/uvloop takes about a second on a small VM; start after that.
SPAWN_LEAD_NS = 3_000_000_000
# Runs whose generator used less of its core than this teach the cost estimate nothing (see CpuCost.observe).
MIN_SHARE_TO_LEARN = 0.5


class CpuCost:
    """Running estimates of generator CPU seconds per request and per token event of a streamed answer, from the
    runs this follower has measured."""

    def __init__(
        self,
        prior_s: float = DEFAULT_CPU_PER_REQUEST_S,
        weight: float = 0.3,
        event_prior_s: float = DEFAULT_CPU_PER_TOKEN_EVENT_S,
    ) -> None:
        self.estimate_s = prior_s
        self.event_estimate_s = event_prior_s
        self.weight = weight

    def observe(self, records: LoadRecords) -> None:
        """Fold in one run's CPU per sent request, or for a streamed run per token event (its CPU less the requests'
        estimated share); runs with too few requests say little and are skipped."""
        sent = int(records.sent.sum())
        # A mostly idle generator's CPU is mostly what it burns whatever it sends (its loop, its ticker), not a cost per
        # request: learning from it would predict saturation at rates the loop handles. Its spinning before sends is
        # measured and left out (timing.WakeMargin).
        work_s = records.work_cpu_s  # its spinning before sends is not a cost per request
        if sent < 200 or work_s <= 0 or records.cpu_share < MIN_SHARE_TO_LEARN:
            return
        events = records.llm.token_events() if records.llm is not None else 0
        if events >= 10 * sent:
            per_event = max(work_s - sent * self.estimate_s, 0.0) / events
            self.event_estimate_s = (1 - self.weight) * self.event_estimate_s + self.weight * per_event
        elif events == 0:
            self.estimate_s = (1 - self.weight) * self.estimate_s + self.weight * work_s / sent

    def per_request_s(self, tokens_per_request: float = 0.0) -> float:
        """The CPU one request costs, with its answer's token events where it streams `tokens_per_request`."""
        return self.estimate_s + tokens_per_request * self.event_estimate_s


COST = CpuCost()


def plan_generators(
    rate: float,
    cpu_per_request_s: float,
    cores: int,
    forced: int | None = None,
    tokens_per_request: float = 0.0,
    cpu_per_event_s: float = 0.0,
) -> GeneratorPlan:
    """How many generator processes a point at `rate` runs on `cores` generator cores, and why. A streamed answer's
    `tokens_per_request` token events cost `cpu_per_event_s` each on top of the request's own cost.

    By default: enough that each stays under TARGET_CPU_SHARE of a core, at most one per core. `forced` (the
    follower setting `generators`) runs exactly that many, sharing cores if need be. Either way the plan is
    `saturated` when the rate needs more cores than the generator has: such a point is invalid, not reported.
    """
    cores = max(cores, 1)
    per_request = cpu_per_request_s + tokens_per_request * cpu_per_event_s
    needed = rate * per_request
    processes = forced if forced is not None else generator_count(rate, per_request, cores)
    saturated = needed > cores
    cost = f"{cpu_per_request_s * 1e6:.0f} us CPU per request"
    if tokens_per_request > 0:
        cost = (
            f"({cost} + {tokens_per_request:.0f} token events x {cpu_per_event_s * 1e6:.1f} us = "
            f"{per_request * 1e6:.0f} us per request; {rate * tokens_per_request:,.0f} token events/s)"
        )
    why = f"needs {needed:.2f} cores at {rate:g} req/s x {cost}, {cores} available"
    if forced is not None:
        why += f"; {processes} processes set by the follower setting generators"
    elif processes > 1:
        why += f"; {processes} processes keep each under {100 * TARGET_CPU_SHARE:g}% of a core"
    if saturated:
        why += ": the generator is saturated"
    return GeneratorPlan(
        processes=processes,
        cores_needed=round(needed, 3),
        cores_available=cores,
        cpu_per_request_us=round(cpu_per_request_s * 1e6, 1),
        forced=forced is not None,
        saturated=saturated,
        reason=why,
        cpu_per_token_event_us=round(cpu_per_event_s * 1e6, 2) if tokens_per_request > 0 else None,
        token_events_per_s=round(rate * tokens_per_request, 1) if tokens_per_request > 0 else None,
    )


def generator_count(rate: float, cpu_per_request_s: float, max_processes: int) -> int:
    """Processes needed so each stays under TARGET_CPU_SHARE of a core at `rate`, within 1..max_processes."""
    if rate <= 0 or max_processes <= 1:
        return 1
    return max(1, min(max_processes, math.ceil(rate * cpu_per_request_s / TARGET_CPU_SHARE)))


def split(offsets_ns: np.ndarray, n: int) -> list[np.ndarray]:
    """Round-robin slices of a sorted schedule; each slice stays sorted and together they are the schedule."""
    return [offsets_ns[k::n] for k in range(n)]


def merge(parts: Sequence[LoadRecords], start_ns: int) -> LoadRecords:
    """One LoadRecords from several processes' records: arrays concatenated and sorted by intended time.

    cpu_s is the busiest process's (the saturation rule is per generator core); wall_s the longest.
    """
    intended = np.concatenate([p.intended_ns for p in parts])
    order = np.argsort(intended, kind="stable")

    def cat(arrays: list[np.ndarray]) -> np.ndarray:
        return np.concatenate(arrays)[order]

    stages = {k: cat([p.stages_ns[k] for p in parts]) for k in parts[0].stages_ns}
    busiest = max(parts, key=lambda p: p.cpu_s)  # the CPU share judged is the busiest process's, its spin beside it
    margins = [p.wake_margin_ns for p in parts if p.wake_margin_ns is not None]
    return LoadRecords(
        intended_ns=intended[order],
        sent_ns=cat([p.sent_ns for p in parts]),
        first_byte_ns=cat([p.first_byte_ns for p in parts]),
        done_ns=cat([p.done_ns for p in parts]),
        status=cat([p.status for p in parts]),
        stages_ns=stages,
        start_ns=start_ns,
        cpu_s=busiest.cpu_s,
        spin_s=busiest.spin_s,
        wake_margin_ns=max(margins) if margins else None,
        wall_s=max(p.wall_s for p in parts),
        loop_lag_ns=np.concatenate([p.loop_lag_ns for p in parts]),
        error_sample=next((p.error_sample for p in parts if p.error_sample), None),
        timer=parts[0].timer,
        capped=cat([p.capped for p in parts]),
        scheduling=_merged_scheduling([p.scheduling for p in parts]),
        llm=_merged_llm(parts, order),
        port=cat([p.port for p in parts]) if all(len(p.port) == len(p) for p in parts) else np.zeros(0, dtype=np.int32),
    )


def _merged_llm(parts: Sequence[LoadRecords], order: np.ndarray) -> LlmColumns | None:
    """The processes' token records in the merged order (None when no process had any)."""
    if all(p.llm is None for p in parts):
        return None
    each = [p.llm if p.llm is not None else LlmColumns.allocate(len(p)) for p in parts]
    listed = [order.tolist()]

    def pick(items: list[Any]) -> list[Any]:
        return [items[i] for i in listed[0]]

    counted = None
    if any(c.client_tokens is not None for c in each):
        counted = np.concatenate([c.client_tokens if c.client_tokens is not None else np.full(len(c.events), -1) for c in each])[
            order
        ]
    return LlmColumns(
        np.concatenate([c.prompt_tokens for c in each])[order],
        np.concatenate([c.completion_tokens for c in each])[order],
        np.concatenate([c.events for c in each])[order],
        pick([t for c in each for t in c.token_times]),
        pick([t for c in each for t in c.texts]),
        counted,
    )


def _merged_scheduling(each: list[str | None]) -> str | None:
    """One description when every process got the same scheduling, else each process's ("0: fifo; 1: nice -10")."""
    if all(s is None for s in each):
        return None
    if len(set(each)) == 1:
        return each[0]
    return "; ".join(f"{k}: {s or 'not set'}" for k, s in enumerate(each))


def _child(
    endpoint: Endpoint,
    bodies: list[bytes],
    offsets: np.ndarray,
    start_ns: int,
    kwargs: dict[str, Any],
    core: int | None,
    realtime: bool,
) -> LoadRecords:
    """One generator process: pinned to its core and prioritised like the single generator thread, then driven."""
    isolation = isolate_generator_thread(frozenset({core}) if core is not None else None, realtime=realtime)
    try:
        records = drive(endpoint, bodies, offsets, start_ns=start_ns, **kwargs)
    finally:
        isolation()
    records.scheduling = isolation.describe()
    return records


def drive_processes(
    endpoint: Endpoint,
    bodies: Sequence[bytes],
    offsets_ns: np.ndarray,
    n: int,
    *,
    lead_ns: int = SPAWN_LEAD_NS,
    body_index: np.ndarray | None = None,
    cpus: Sequence[int] | None = None,
    **kwargs: Any,
) -> list[LoadRecords]:
    """Run the schedule split over `n` generator processes sharing one start; returns each process's records.

    Each process gets max_concurrency / n of the in-flight cap. Process k is pinned to cpus[k % len(cpus)] (the
    generator's cores; None: unpinned) at the generator's priority, real-time only when each has a core of its own,
    and its records say which scheduling it got. Processes are spawned (not forked: the caller holds threads and an
    event loop) and gone when this returns.
    """
    if n <= 1:
        return [drive(endpoint, bodies, offsets_ns, body_index=body_index, **kwargs)]
    if "max_concurrency" in kwargs:
        kwargs["max_concurrency"] = max(1, kwargs["max_concurrency"] // n)
    start_ns = time.monotonic_ns() + lead_ns
    with ProcessPoolExecutor(max_workers=n, mp_context=multiprocessing.get_context("spawn")) as pool:
        # The per-request body choice is split like the schedule, so each request keeps its input.
        picks = split(body_index, n) if body_index is not None else [None] * n
        cores = sorted(cpus) if cpus else []
        realtime = len(cores) >= n
        futures = [
            pool.submit(
                _child,
                endpoint,
                list(bodies),
                part,
                start_ns,
                {**kwargs, "body_index": pick},
                cores[k % len(cores)] if cores else None,
                realtime,
            )
            for k, (part, pick) in enumerate(zip(split(offsets_ns, n), picks, strict=True))
        ]
        return [f.result() for f in futures]
