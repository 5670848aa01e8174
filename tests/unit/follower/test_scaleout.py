"""Generator scale-out arithmetic: how many processes, the round-robin split, and the exact merge."""

from __future__ import annotations

import numpy as np
import pytest

from follower.loadgen.llmrecords import LlmColumns
from follower.loadgen.records import LoadRecords
from follower.loadgen.scaleout import CpuCost, generator_count, merge, plan_generators, split


def test_generator_count_follows_rate_and_cost() -> None:
    assert generator_count(1000, 140e-6, 4) == 1  # 14% of a core
    assert generator_count(8000, 140e-6, 4) == 3  # 1.12 cores at 50% each
    assert generator_count(80000, 140e-6, 4) == 4  # capped by the generator cores
    assert generator_count(80000, 140e-6, 1) == 1


def test_split_and_merge_give_back_the_schedule() -> None:
    offsets = np.sort(np.random.default_rng(1).integers(0, 10**9, 1001))
    parts = split(offsets, 3)
    assert sum(len(p) for p in parts) == len(offsets)
    records = []
    for k, part in enumerate(parts):
        rec = LoadRecords.allocate(5_000, part)
        rec.sent_ns[:] = rec.intended_ns + 10
        rec.done_ns[:] = rec.intended_ns + 1000 + k
        rec.status[:] = 200
        rec.cpu_s, rec.wall_s = 0.1 * (k + 1), 1.0
        records.append(rec)
    merged = merge(records, 5_000)
    assert np.array_equal(merged.intended_ns, offsets + 5_000)
    assert np.all(merged.done_ns - merged.intended_ns >= 1000) and int(merged.ok.sum()) == len(offsets)
    assert abs(merged.cpu_share - 0.3) < 1e-9  # the busiest process: saturation is judged per generator core


def test_cpu_cost_learns_from_runs() -> None:
    cost = CpuCost(prior_s=100e-6, weight=0.5)
    rec = LoadRecords.allocate(0, np.arange(1000))
    rec.sent_ns[:] = 0
    rec.cpu_s, rec.wall_s = 0.3, 0.5  # 300 µs per request, 60% of a core
    cost.observe(rec)
    assert abs(cost.estimate_s - 200e-6) < 1e-12
    idle = LoadRecords.allocate(0, np.arange(1000))
    idle.cpu_s, idle.wall_s = 0.3, 10.0  # 3% of a core: timer spin between sparse sends, not a per-request cost
    cost.observe(idle)
    assert abs(cost.estimate_s - 200e-6) < 1e-12


def test_plan_says_how_many_processes_and_why() -> None:
    one = plan_generators(2000, 140e-6, 1)
    assert (one.processes, one.saturated, one.forced) == (1, False, False)
    assert one.cores_needed == 0.28 and "needs 0.28 cores at 2000 req/s x 140 us CPU per request, 1 available" in one.reason
    three = plan_generators(8000, 140e-6, 4)
    assert three.processes == 3 and not three.saturated and "3 processes keep each under 50%" in three.reason
    # More than the generator's cores can give: one saturated process is not silently reported as a measurement.
    over = plan_generators(10000, 140e-6, 1)
    assert over.processes == 1 and over.saturated and over.reason.endswith("the generator is saturated")
    forced = plan_generators(100, 140e-6, 1, forced=2)
    assert (forced.processes, forced.forced, forced.saturated) == (2, True, False)
    assert "2 processes set by the follower setting generators" in forced.reason
    assert plan_generators(100, 140e-6, 0).cores_available == 1  # an unpinned generator still has one core


def test_a_streamed_runs_cpu_teaches_the_cost_per_token_event() -> None:
    cost = CpuCost(prior_s=100e-6, weight=1.0, event_prior_s=50e-6)
    rec = LoadRecords.allocate(0, np.arange(1000))
    rec.sent_ns[:] = 0
    rec.llm = LlmColumns.allocate(1000)
    rec.llm.events[:] = 64  # 64,000 token events
    rec.cpu_s, rec.wall_s = 0.1 + 64_000 * 10e-6, 1.0  # 100 us per request and 10 us per event
    cost.observe(rec)
    assert cost.event_estimate_s == pytest.approx(10e-6) and cost.estimate_s == 100e-6  # the request cost stays
    assert cost.per_request_s(64) == pytest.approx(100e-6 + 640e-6)


def test_an_llm_points_plan_counts_its_token_events() -> None:
    # 500 req/s x 64 tokens = 32,000 events/s at 20 us each: 0.64 cores of events + 0.05 of requests.
    plan = plan_generators(500, 100e-6, 2, tokens_per_request=64, cpu_per_event_s=20e-6)
    assert plan.cores_needed == pytest.approx(0.69) and plan.processes == 2 and not plan.saturated
    assert plan.token_events_per_s == 32_000 and plan.cpu_per_token_event_us == 20.0
    assert "64 token events x 20.0 us" in plan.reason and "32,000 token events/s" in plan.reason
    over = plan_generators(2000, 100e-6, 1, tokens_per_request=64, cpu_per_event_s=20e-6)
    assert over.saturated and over.cores_needed == pytest.approx(2.76)  # refused with the figures, not run
    assert plan_generators(500, 100e-6, 2).token_events_per_s is None  # a tensor model's point has none
