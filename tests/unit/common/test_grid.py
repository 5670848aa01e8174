"""The grid: each LoadSpec field reaches every point once, copied as it is or resolved per point."""

from __future__ import annotations

import pytest

from common.spec.grid import (
    AT_SUBMISSION,
    PER_POINT,
    POINT_FROM_LOAD,
    drain_bound_s,
    estimate_seconds,
    expand,
    overload_allowance_s,
)
from common.spec.job import PointSpec
from common.spec.load import LoadSpec
from common.spec.parse import parse_spec


def test_every_load_field_is_copied_or_resolved_per_point_and_lands_on_a_point_field() -> None:
    assert set(POINT_FROM_LOAD.values()) | set(PER_POINT) | set(AT_SUBMISSION) == set(LoadSpec.model_fields)
    assert not set(POINT_FROM_LOAD.values()) & set(PER_POINT)
    assert not set(AT_SUBMISSION) & (set(POINT_FROM_LOAD.values()) | set(PER_POINT))
    assert set(POINT_FROM_LOAD) <= set(PointSpec.model_fields)


def test_points_carry_the_load_as_given_and_their_own_rate_and_seed() -> None:
    spec = parse_spec({
        "name": "j", "model": "m:1", "backends": ["onnxruntime", "triton"], "batch_sizes": [1, 4],
        "load": {"pattern": "gamma", "cv": 2.5, "rate": [100, 200], "duration": "3s", "warmup": "500ms",
                 "max_concurrency": 64, "cap_policy": "drop", "window": "2s"},
    })  # fmt: skip
    points = expand(spec)
    assert [(p.backend, p.batch_size, p.rate) for p in points] == [
        (b, n, r) for b in ("onnxruntime", "triton") for n in (1, 4) for r in (100.0, 200.0)
    ]
    assert [p.index for p in points] == list(range(8)) and len({p.seed for p in points}) == 8
    for p in points:
        assert (p.pattern, p.cv, p.duration_s, p.warmup_s, p.max_concurrency, p.cap_policy, p.window_s) == (
            "gamma", 2.5, 3.0, 0.5, 64, "drop", 2.0)
        assert p.trace_s is None and p.trace_dataset is None and p.concurrency is None


@pytest.mark.parametrize("duration_s,bound_s", [(0.5, 2.0), (10.0, 10.0), (120.0, 30.0)])
def test_a_point_waits_for_a_backlog_as_long_as_it_ran_within_fixed_bounds(duration_s: float, bound_s: float) -> None:
    assert drain_bound_s(duration_s) == bound_s


def test_the_most_a_job_can_take_adds_every_runs_drain_bound_to_the_estimate() -> None:
    base = {"name": "j", "model": "m:1", "backends": ["onnxruntime"], "batch_sizes": [1, 4],
            "load": {"rate": [100, 200, 400], "duration": "5s", "warmup": "1s"}}  # fmt: skip
    spec = parse_spec(base)
    assert estimate_seconds(spec) == 6 * 6.0 + 5.0
    assert overload_allowance_s(spec, len(expand(spec))) == 6 * 5.0
    search = parse_spec({**base, "load": {"duration": "5s", "search": {"low": 50, "high": 800, "max_steps": 4}},
                         "slo": {"p99_ms": 50}})  # fmt: skip
    # Each search step is a run with its own drain.
    assert overload_allowance_s(search, len(expand(search))) == len(expand(search)) * 4 * 5.0 > 0
