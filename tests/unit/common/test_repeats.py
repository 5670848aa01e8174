"""Repeat runs: the spread across a configuration's runs, held against each run's own CI. Runs of one unchanged
machine are rarely called changed; a run on a slower machine is; a wide spread from short runs is called noisy."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import numpy as np
import pytest

from common.spec.grid import expand, server_runs
from common.spec.job import MAX_POINTS
from common.spec.parse import InvalidSpec, parse_spec
from common.stats import block_bootstrap_ci
from common.wire.repeats import summarize_repeats
from common.wire.results import Environment, Percentiles, PointResult

BASE: dict[str, Any] = {"name": "j", "model": "m:1", "backends": ["onnxruntime", "triton"], "batch_sizes": [1, 4],
                        "load": {"rate": [100, 200], "duration": "2s", "warmup": "0s"}}  # fmt: skip


def _run(point: Any, rng: np.random.Generator, *, n: int = 2000, scale_ms: float = 5.0, rate: float = 1000.0) -> PointResult:
    """A run measured as the follower does: n requests at `rate`, its p50/p99 and their block-bootstrap CIs."""
    t_ns = (np.arange(n) * (1e9 / rate)).astype(np.int64)
    lat_ms = rng.lognormal(np.log(scale_ms), 0.4, n)
    lat_ns = (lat_ms * 1e6).astype(np.int64)
    (lo50, hi50), (lo99, hi99) = block_bootstrap_ci(t_ns, lat_ns, (0.50, 0.99), seed=int(rng.integers(2**31)))
    p50, p99 = float(np.quantile(lat_ms, 0.5)), float(np.quantile(lat_ms, 0.99))
    env = Environment(follower_id="f", host="h", cpu_model="cpu", cpu_count=2, gpus=[], python="3.11", benchfleet="0",
                      backend_version="1", seed=0)  # fmt: skip
    pct = Percentiles(count=n, mean=float(lat_ms.mean()), p50=p50, p90=p99, p95=p99, p99=p99, p999=p99, max=p99)
    return PointResult(point=point, started_at=datetime.now(UTC), measured_s=n / 1000, requests=n, ok=n, errors=0,
                       offered_rate=1000.0, achieved_rate=1000.0, latency_ms=pct, service_ms=None, send_lag_ms=None,
                       cold_start=None, valid=True, environment=env,
                       latency_ci_ms={"p50": (lo50 / 1e6, hi50 / 1e6), "p99": (lo99 / 1e6, hi99 / 1e6)})  # fmt: skip


def _points(count: int) -> list[Any]:
    spec = parse_spec({**BASE, "backends": ["onnxruntime"], "batch_sizes": [1], "load": {"rate": [100]},
                       "repeats": count})  # fmt: skip
    return expand(spec)


def test_repeats_interleave_within_a_backend_or_across_backends_with_fresh_servers() -> None:
    shared = expand(parse_spec({**BASE, "repeats": 2}))
    assert len(shared) == 16 and [p.index for p in shared] == list(range(16))
    # Every configuration once, then again, within each backend's one server.
    assert [(p.backend, p.repeat, p.config) for p in shared[:8]] == [
        ("onnxruntime", r, c) for r in (0, 1) for c in range(4)]  # fmt: skip
    assert [(p.backend, p.batch_size, p.rate) for p in shared[4:8]] == [(p.backend, p.batch_size, p.rate) for p in shared[:4]]
    assert len({p.seed for p in shared}) == 16  # each run its own arrivals
    assert [len(run) for run in server_runs(shared, fresh_server=False)] == [8, 8]
    fresh = expand(parse_spec({**BASE, "repeats": {"count": 2, "fresh_server": True}}))
    assert [(p.repeat, p.backend) for p in fresh[::4]] == [(0, "onnxruntime"), (0, "triton"), (1, "onnxruntime"), (1, "triton")]
    assert [len(run) for run in server_runs(fresh, fresh_server=True)] == [4, 4, 4, 4]
    assert {p.config for p in fresh if p.repeat == 1} == set(range(8))


def test_repeats_are_checked_and_count_against_the_grid_limit() -> None:
    assert parse_spec({**BASE, "repeats": 3}).repeats.count == 3
    for bad in (0, -1, 21, "x", True):
        with pytest.raises(InvalidSpec) as err:
            parse_spec({**BASE, "repeats": bad})
        assert err.value.field.startswith("repeats"), err.value.field
    with pytest.raises(InvalidSpec, match="repeats included"):
        parse_spec({**BASE, "load": {"rate": list(range(1, 33))}, "batch_sizes": [1, 2, 4, 8], "repeats": 2 + MAX_POINTS // 256})


def test_runs_of_one_unchanged_machine_are_rarely_called_changed() -> None:
    rng = np.random.default_rng(7)
    verdicts = []
    for _ in range(40):
        summary = summarize_repeats([_run(p, rng) for p in _points(3)])
        assert len(summary) == 1 and summary[0].runs == [0, 1, 2]
        verdicts.append(summary[0].verdict)
    # The test's nominal false-alarm rate is 5% per figure; p50 and p99 are both tested.
    assert verdicts.count("machine_changed") <= 6, verdicts


def test_a_run_on_a_slower_machine_is_called_changed() -> None:
    rng = np.random.default_rng(11)
    caught = 0
    for _ in range(40):
        points = _points(3)
        runs = [_run(points[0], rng), _run(points[1], rng), _run(points[2], rng, scale_ms=6.0)]  # 20% slower
        summary = summarize_repeats(runs)[0]
        caught += summary.verdict == "machine_changed"
        assert summary.metrics[0].cv is not None and summary.metrics[0].cv > 0.05
    assert caught >= 36, caught


def test_a_wide_spread_from_short_runs_is_noisy_not_a_changed_machine() -> None:
    rng = np.random.default_rng(3)
    noisy = 0
    for _ in range(20):
        summary = summarize_repeats([_run(p, rng, n=120, rate=100.0) for p in _points(3)])[0]
        p99 = summary.metrics[1]
        # 120 requests pin a p99 down poorly: the runs' p99s spread widely, and their CIs are as wide.
        noisy += summary.verdict == "noisy" and p99.cv_flagged
    assert noisy >= 12, noisy


def test_a_configuration_run_once_has_no_spread_and_a_job_without_repeats_none() -> None:
    rng = np.random.default_rng(1)
    assert summarize_repeats([_run(p, rng) for p in expand(parse_spec(BASE))]) == []
    one = _points(2)
    summary = summarize_repeats([_run(one[0], rng), _run(one[1], rng).model_copy(update={"latency_ms": None})])[0]
    assert summary.verdict == "too_few" and summary.metrics[1].values[1] is None
