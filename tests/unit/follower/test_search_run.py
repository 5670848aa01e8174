"""A search's probes as the point reports them (follower/point/search.py), with the measurement faked at its seam (the
`measure` call): a load whose first run was invalid is measured again, the valid repeat alone decides it, and the first
run stays as it was judged (never marked passed), while the point is the valid run's."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

from common.spec.grid import expand
from common.spec.parse import parse_spec
from common.spec.slo import SLO
from common.wire.results import ColdStart, Environment, Percentiles, PointResult, Reason
from follower.point.context import PointContext, ServerRun
from follower.point.search import run_search

SPEC = {
    "name": "s",
    "model": "m:1",
    "slo": {"p99_ms": 10},
    "load": {"pattern": "poisson", "duration": "2s", "search": {"low": 10, "high": 20, "precision": 0.6}},
}


def _result(point: Any, *, valid: bool, p99_ms: float) -> PointResult:
    env = Environment(follower_id="f", host="h", cpu_model="cpu", cpu_count=2, gpus=[], python="3.11", benchfleet="0",
                      backend_version="1", seed=point.seed)  # fmt: skip
    latency = Percentiles(count=100, mean=p99_ms / 2, p50=p99_ms / 2, p90=p99_ms, p95=p99_ms, p99=p99_ms, p999=p99_ms, max=p99_ms)
    reasons = [] if valid else [Reason(code="send_lag", text="the generator sent late (a host stall)")]
    return PointResult(point=point, started_at=datetime.now(UTC), measured_s=2.0, requests=100, ok=100, errors=0,
                       offered_rate=point.rate, achieved_rate=point.rate, latency_ms=latency, service_ms=None,
                       send_lag_ms=None, cold_start=None, valid=valid, reasons=reasons, environment=env)  # fmt: skip


def test_an_invalid_first_run_is_not_marked_passed_when_its_valid_repeat_decides(tmp_path: Path) -> None:
    (point,) = expand(parse_spec(SPEC))
    runs = iter([(10, False, 5.0), (10, True, 6.0), (20, True, 50.0)])  # (load, valid, p99 ms) in the order measured

    async def measure(probe: Any, ctx: PointContext, cold: ColdStart | None) -> PointResult:
        load, valid, p99 = next(runs)
        assert probe.rate == load and probe.search is None
        return _result(probe, valid=valid, p99_ms=p99)

    run = ServerRun(model=cast(Any, None), model_path=tmp_path, workdir=tmp_path, slo=SLO(p99_ms=10))
    ctx = PointContext(run=run, backend=cast(Any, None), endpoint=cast(Any, None), backend_version="1")
    result = asyncio.run(run_search(point, ctx, None, measure))
    answer = result.search
    assert answer is not None and answer.found == 10 and answer.lowest_fail == 20
    first, repeat, high = answer.probes
    # The invalid first run said nothing of the SLO: it stays failed, and the repeat decided alone (not pooled).
    assert (first.valid, first.passed, first.pooled) == (False, False, False)
    assert (repeat.valid, repeat.passed, repeat.repeat, repeat.pooled) == (True, True, True, False)
    assert not high.passed
    # The point is the valid run at the load found.
    assert answer.chosen == 1 and result.valid and result.point.rate == 10 and result.latency_ms is not None
    assert result.latency_ms.p99 == 6.0
