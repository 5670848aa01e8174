"""The measurement core end to end against the real ORT server: closed loop, windows and stability, the
concurrency cap, stage breakdown, mergeable histograms and the SLO search."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from common.spec.job import PointSpec
from common.spec.load import SearchSpec, Stability
from common.spec.slo import SLO
from common.stats import decode, merge, summarize
from common.wire.models import ModelMeta
from common.wire.results import PointResult, WindowStat
from follower.point.context import HostFacts, ServerRun
from follower.point.runner import run_backend

pytestmark = pytest.mark.integration

HOST = HostFacts(follower_id="f-test", host="testhost", cpu_model="test cpu", cpu_count=os.cpu_count() or 1)


def _point(index: int, **kw: object) -> PointSpec:
    base: dict = dict(
        index=index, backend="onnxruntime", batch_size=1, pattern="poisson", rate=150.0, duration_s=2.0,
        warmup_s=0.5, max_concurrency=64, seed=index + 1,
    )  # fmt: skip
    base.update(kw)
    return PointSpec(**base)


@pytest.fixture(scope="module")
def measured(mlp_meta: ModelMeta, mlp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    points = [
        _point(0, pattern="closed", rate=0.0, concurrency=2),
        _point(1, window_s=0.5, stability=Stability(windows=3, tolerance=0.95, max_duration=4.0)),
        _point(2, pattern="constant", rate=2000.0, duration_s=1.0, max_concurrency=1, cap_policy="drop"),
        _point(3, duration_s=2.0, warmup_s=0.2, search=SearchSpec(low=250, high=400, max_steps=3)),
    ]
    progress: list[tuple[int, list[WindowStat]]] = []

    async def run() -> list[PointResult]:
        return [
            r
            async for r in run_backend(
                "onnxruntime",
                points,
                ServerRun(
                    model=mlp_meta,
                    model_path=mlp_path,
                    workdir=tmp_path_factory.mktemp("m"),
                    host_facts=HOST,
                    slo=SLO(p99_ms=10_000.0),
                    progress_sink=lambda p, w: progress.append((p.index, w)),
                ),
            )
        ]

    results = asyncio.run(run())
    return {"results": results, "progress": progress}


def test_closed_loop_keeps_its_users_busy(measured: dict) -> None:
    result: PointResult = measured["results"][0]
    assert result.point.concurrency == 2
    assert result.ok > 50 and result.errors == 0
    # Closed loop: no schedule, so the send lag is zero and latency equals service time.
    assert result.send_lag_ms is not None and result.send_lag_ms.max < 0.01
    assert result.latency_ms is not None and result.service_ms is not None
    assert result.latency_ms.p50 == pytest.approx(result.service_ms.p50, rel=0.01)
    assert result.generator_cpu_share is not None and result.generator_cpu_share > 0
    # The host's idle policy is part of the conditions: held where PM QoS is writable, else the reason.
    expected = "held at 0 µs" if os.access("/dev/cpu_dma_latency", os.W_OK) else "not held: "
    assert result.cpu_wakeup_latency is not None and result.cpu_wakeup_latency.startswith(expected)
    assert result.host_steal_share is None or 0.0 <= result.host_steal_share < 1.0


def test_windows_stability_and_live_progress(measured: dict) -> None:
    result: PointResult = measured["results"][1]
    # Stops at the first window boundary past the minimum duration where 3 windows agree (tolerance is generous).
    assert 2.0 <= result.measured_s <= 4.0
    assert result.stable is True
    assert len(result.windows) >= 3 and all(w.duration_s == 0.5 for w in result.windows)
    assert sum(w.requests for w in result.windows) == result.requests
    published = [w for i, w in measured["progress"] if i == 1]
    assert published and len(published[-1]) >= 3, "windows are published while the point runs"
    assert result.latency_ci_ms is not None and "p50" in result.latency_ci_ms
    lo, hi = result.latency_ci_ms["p50"]
    assert result.latency_ms is not None and lo <= result.latency_ms.p50 * 1.01 and result.latency_ms.p50 <= hi * 1.01


def test_concurrency_cap_drops_are_counted_and_invalidate(measured: dict) -> None:
    result: PointResult = measured["results"][2]
    assert result.dropped > 0 and result.capped >= result.dropped
    assert "dropped" in [r.code for r in result.reasons]
    assert not result.valid and result.ok + result.dropped <= result.requests


def test_stages_sum_to_the_service_time(measured: dict) -> None:
    for result in measured["results"][:2]:
        stages = result.stages_ms
        assert stages is not None
        server = stages["decode"] + stages["queue"] + stages["infer"] + stages["encode"]
        assert 0 < server < stages["service"], "server-side stages fit inside the client-measured service time"
        assert stages["transmission"] >= 0
        assert server + stages["transmission"] == pytest.approx(stages["service"], rel=1e-9)
        # The per-stage mean is over the same requests the HDR summary counts (3 significant digits).
        assert result.service_ms is not None
        assert stages["service"] == pytest.approx(result.service_ms.mean, rel=0.02)


def test_histograms_decode_and_merge_exactly(measured: dict) -> None:
    a, b = measured["results"][0], measured["results"][1]
    assert a.latency_hdr and b.latency_hdr
    ha = decode(a.latency_hdr)
    assert ha.get_total_count() == a.ok
    # The histogram read with benchfleet's own estimator (nearest rank: HdrHistogram's get_value_at_percentile rounds
    # its rank down, a neighbouring sample in a sparse tail) gives the exact p99 to its 3 significant digits.
    from_hist = summarize(ha)
    assert from_hist is not None and a.latency_ms is not None
    assert from_hist.p99 == pytest.approx(a.latency_ms.p99, rel=1e-3)
    merged = merge([a.latency_hdr, b.latency_hdr])
    assert merged.get_total_count() == a.ok + b.ok
    assert merged.get_max_value() == max(ha.get_max_value(), decode(b.latency_hdr).get_max_value())


def test_a_search_whose_ceiling_passes_says_so_after_its_two_bounds(measured: dict) -> None:
    """Bisection itself is exercised against a server of known capacity (tests/e2e/test_search.py) and on synthetic
    curves (tests/unit/follower/test_searchplan.py); here every load meets a generous SLO."""
    result: PointResult = measured["results"][3]
    answer = result.search
    assert answer is not None and answer.probes[0].load == 250
    if not all(p.valid for p in answer.probes):
        # A noisy host made a run invalid: an invalid run never passes, an uncertain load is run again, and the last
        # run at a load decides it. Both loads decided passing is the ceiling not reached, whatever came before.
        assert not [p for p in answer.probes if p.passed and not p.valid], answer.probes
        decided = {p.load: p for p in answer.probes}
        if set(decided) == {250, 400} and all(p.passed for p in decided.values()):
            assert answer.stopped == "ceiling_not_reached" and answer.found == 400, answer
        else:
            assert answer.stopped in ("floor_fails", "resolved", "out_of_probes"), answer
        return
    assert [p.load for p in answer.probes] == [250, 400]
    assert answer.stopped == "ceiling_not_reached" and answer.found == 400 and answer.lowest_fail is None
    assert answer.chosen == 1 and result.point.rate == 400 and result.valid
    assert answer.summary().startswith(">= 400 req/s, p99 <= 10000 ms; 2 probes, the ceiling was not reached")
    assert [p.seed for p in answer.probes] == [4, 4 + 7919]  # each probe its own schedule
