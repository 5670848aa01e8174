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
from follower.point.idle import Drain
from follower.point.search import DRAIN_LIMIT_S, run_search

SPEC = {
    "name": "s",
    "model": "m:1",
    "slo": {"p99_ms": 10},
    "load": {"pattern": "poisson", "duration": "2s", "search": {"low": 10, "high": 20, "precision": 0.6}},
}


def _result(point: Any, *, valid: bool, p99_ms: float, ci: tuple[float, float] | None = None) -> PointResult:
    env = Environment(
        follower_id="f",
        host="h",
        cpu_model="cpu",
        cpu_count=2,
        gpus=[],
        python="3.11",
        benchfleet="0",
        backend_version="1",
        seed=point.seed,
    )
    latency = Percentiles(count=100, mean=p99_ms / 2, p50=p99_ms / 2, p90=p99_ms, p95=p99_ms, p99=p99_ms, p999=p99_ms, max=p99_ms)
    reasons = [] if valid else [Reason(code="send_lag", text="the generator sent late (a host stall)")]
    return PointResult(
        point=point,
        started_at=datetime.now(UTC),
        measured_s=2.0,
        requests=100,
        ok=100,
        errors=0,
        offered_rate=point.rate,
        achieved_rate=point.rate,
        latency_ms=latency,
        service_ms=None,
        send_lag_ms=None,
        cold_start=None,
        valid=valid,
        reasons=reasons,
        environment=env,
        latency_ci_ms={"p99": ci} if ci else None,
    )


class ScriptedGauge:
    """The server between probes, scripted: each wait_drained() gives the next (seconds waited, drained)."""

    def __init__(self, drains: list[tuple[float, bool]] | None = None) -> None:
        self.drains = iter(drains or [])
        self.references = 0
        self.limits: list[float] = []

    async def reference(self) -> float:
        self.references += 1
        return 0.005

    async def wait_drained(self, limit_s: float) -> Drain:
        self.limits.append(limit_s)
        waited, drained = next(self.drains, (0.0, True))
        return Drain(waited_s=waited, drained=drained, idle_s=0.005, last_s=0.005 if drained else 2.5)


def _searched(
    tmp_path: Path,
    measured: list[tuple[float, bool, float, tuple[float, float] | None]],
    gauge: ScriptedGauge | None = None,
    search: dict[str, Any] | None = None,
) -> PointResult:
    """The search's point, its runs faked in the order measured: (load, valid, p99 ms, the p99's 95% interval)."""
    spec = {**SPEC, "load": {**SPEC["load"], "search": search}} if search else SPEC
    (point,) = expand(parse_spec(spec))
    runs = iter(measured)

    async def measure(probe: Any, ctx: PointContext, cold: ColdStart | None) -> PointResult:
        load, valid, p99, ci = next(runs)
        assert probe.rate == load and probe.search is None
        return _result(probe, valid=valid, p99_ms=p99, ci=ci)

    run = ServerRun(model=cast(Any, None), model_path=tmp_path, workdir=tmp_path, slo=SLO(p99_ms=10))
    ctx = PointContext(run=run, backend=cast(Any, None), endpoint=cast(Any, None), backend_version="1")
    return asyncio.run(run_search(point, ctx, None, measure, gauge or ScriptedGauge()))


def test_an_invalid_first_run_is_not_marked_passed_when_its_valid_repeat_decides(tmp_path: Path) -> None:
    result = _searched(tmp_path, [(10, False, 5.0, None), (10, True, 6.0, None), (20, True, 50.0, None)])
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


def test_an_invalid_repeat_of_an_uncertain_run_fails_and_the_point_is_the_valid_run(tmp_path: Path) -> None:
    # The floor's p99 (9 ms) had an interval straddling the 10 ms limit: measured again, the repeat was invalid. The
    # valid run alone decides; the repeat, left out, is not passed; the point is the valid run.
    result = _searched(tmp_path, [(10, True, 9.0, (8.0, 12.0)), (10, False, 5.0, None), (20, True, 50.0, None)])
    answer = result.search
    assert answer is not None and answer.found == 10
    first, repeat, _ = answer.probes
    assert (first.passed, first.pooled) == (True, False) and (repeat.valid, repeat.passed, repeat.pooled) == (False, False, False)
    assert answer.chosen == 0 and result.valid and result.latency_ms is not None and result.latency_ms.p99 == 9.0


def test_each_probe_after_the_first_waits_for_the_server_to_drain_and_says_how_long(tmp_path: Path) -> None:
    gauge = ScriptedGauge([(0.0, True), (3.5, True)])
    search = {"low": 10, "high": 20, "precision": 0.1, "max_steps": 3}
    result = _searched(tmp_path, [(10, True, 5.0, None), (20, True, 50.0, None), (14.1, True, 8.0, None)], gauge, search)
    answer = result.search
    assert answer is not None and gauge.references == 1  # the idle time, once, before the first probe
    assert [p.drain_s for p in answer.probes] == [None, 0.0, 3.5] and all(p.drained for p in answer.probes)
    assert gauge.limits == [DRAIN_LIMIT_S, DRAIN_LIMIT_S]


def test_a_probe_that_would_start_on_a_backlog_is_invalid_and_measured_again(tmp_path: Path) -> None:
    # After the overloaded ceiling (20 req/s), the server was still behind when the bound ran out: the probe at 14.1
    # read the backlog (p99 80 ms), so it is invalid, said why, and its load is measured again once drained.
    gauge = ScriptedGauge([(0.0, True), (DRAIN_LIMIT_S, False), (4.0, True)])
    measured = [(10, True, 5.0, None), (20, True, 50.0, None), (14.1, True, 80.0, None), (14.1, True, 8.0, None)]
    result = _searched(tmp_path, measured, gauge, {"low": 10, "high": 20, "precision": 0.1, "max_steps": 4})
    answer = result.search
    assert answer is not None
    carried = answer.probes[2]
    assert (carried.valid, carried.passed, carried.drained, carried.drain_s) == (False, False, False, DRAIN_LIMIT_S)
    assert any("still working off an earlier backlog" in r for r in carried.reasons), carried.reasons
    repeat = answer.probes[3]
    assert repeat.repeat and repeat.valid and repeat.passed and answer.found == 14.1


def test_the_stated_interval_widens_the_bracket_by_each_probe_s_uncertainty(tmp_path: Path) -> None:
    # 14.1 passed, but its p99 interval (7 to 11 ms) holds the 10 ms limit, and so did its repeat's: the limit may lie
    # below it. 10 passed surely (4 to 6 ms), 20 failed surely: the interval is [10, 20], not the bracket [14.1, 20].
    search = {"low": 10, "high": 20, "precision": 0.1, "max_steps": 4}
    measured = [
        (10, True, 5.0, (4.0, 6.0)),
        (20, True, 50.0, (40.0, 60.0)),
        (14.1, True, 9.0, (7.0, 11.0)),
        (14.1, True, 9.5, (7.5, 11.5)),
    ]
    answer = _searched(tmp_path, measured, search=search).search
    assert answer is not None and (answer.found, answer.lowest_fail) == (14.1, 20)
    assert (answer.limit_low, answer.limit_high) == (10, 20)
    assert answer.summary().endswith("with sampling error allowed for, the limit lies in [10, 20] req/s")
    # Where every verdict was sure, the interval is the bracket and the summary says nothing more.
    search["max_steps"] = 3
    sure = _searched(
        tmp_path, [(10, True, 5.0, (4.0, 6.0)), (20, True, 50.0, (40.0, 60.0)), (14.1, True, 8.0, (7.0, 9.0))], search=search
    ).search
    assert sure is not None and (sure.limit_low, sure.limit_high) == (sure.found, sure.lowest_fail) == (14.1, 20)
    assert "sampling error" not in sure.summary()
