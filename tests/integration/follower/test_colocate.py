"""Co-location with real ONNX Runtime servers: each model alone, then both at once on shared cores, and the runs
say which is which. That the pair is measured slower together (their medians) is a claim about the host's CPU:
bench/colocate.py shows it, as the ratio of the medians measured in the same run."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bench.colocate import colocate_spec, run_pair
from follower.host.cpuplan import plan_cpus
from follower.point.colocate import assign_cpus

pytestmark = pytest.mark.integration


def test_split_cores_give_each_server_its_own_and_too_few_are_shared() -> None:
    assert assign_cpus(frozenset({1, 2, 3, 4}), 2, "split") == [frozenset({1, 3}), frozenset({2, 4})]
    assert assign_cpus(frozenset({1}), 2, "split") == [frozenset({1}), frozenset({1})]
    assert assign_cpus(frozenset({1, 2}), 2, "shared") == [frozenset({1, 2})] * 2


def test_two_cpu_models_run_alone_then_together_measured_at_the_same_time(tmp_path: Path) -> None:
    if plan_cpus().server is None:
        pytest.skip(f"this host has {os.cpu_count()} CPU: the generator and the servers cannot have cores apart")
    spec = colocate_spec(rate=600.0, duration_s=4.0)
    results = run_pair(tmp_path, spec)
    assert sorted(results) == [(0, ()), (0, (1,)), (1, ()), (1, (0,))]
    spans = {}
    for key, result in results.items():
        assert result.latency_ms is not None and result.ok > 0 and result.errors == 0, (key, result)
        start = result.started_at.timestamp()
        spans[key] = (start, start + result.measured_s)
    # Alone, one after the other; together, both measured at once: each measured window holds part of the other's.
    (a0, a1), (b0, b1) = spans[(0, ())], spans[(1, ())]
    assert a1 <= b0 or b1 <= a0, spans
    (c0, c1), (d0, d1) = spans[(0, (1,))], spans[(1, (0,))]
    assert max(c0, d0) < min(c1, d1), spans
    assert c0 >= max(a1, b1) and d0 >= max(a1, b1), spans
