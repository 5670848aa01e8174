"""Co-location jobs: their points (each model alone, then each pair at once), estimates and refusals, and the
interference matrix the leader reads back from them."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import ValidationError

from common.spec.grid import estimate_seconds, expand, server_runs, server_starts
from common.spec.job import JobSpec
from common.wire.jobs import JobView, as_ran
from common.wire.results import Percentiles, PointResult
from leader.analysis.interference import matrix

BASE = {"name": "co", "model": "a:1", "backends": ["onnxruntime"], "load": {"rate": 100, "duration": "5s", "warmup": "1s"}}


def spec(**extra: Any) -> JobSpec:
    return JobSpec.model_validate({**BASE, **extra})


def test_each_model_runs_alone_then_each_pair_at_once() -> None:
    job = spec(colocate={"models": ["b:1", "c:1"]})
    points = expand(job)
    assert [(p.served, p.beside, p.group) for p in points] == [
        (0, [], 0), (1, [], 1), (2, [], 2), (0, [1], 3), (1, [0], 3), (0, [2], 4), (2, [0], 4), (1, [2], 5), (2, [1], 5),
    ]  # fmt: skip
    assert [[p.index for p in run] for run in server_runs(points, False)] == [[0], [1], [2], [3, 4], [5, 6], [7, 8]]
    assert len({p.seed for p in points}) == 9 and server_starts(job) == 9
    assert estimate_seconds(job) == 6 * (1 + job.load.max_run_s) + 9 * 5.0  # six runs, nine server starts


@pytest.mark.parametrize(("extra", "says"), [
    ({"batch_sizes": [1, 8]}, "without batch_sizes"),
    ({"colocate": {"models": ["b:1"], "mps": True}}, "set requires.gpu"),
    ({"colocate": {"models": ["b:1"], "active_thread_percentage": [50, 50]}}, "MPS only"),
    ({"colocate": {"models": ["b:1", "b:1"]}}, "must not repeat"),
    ({"data": {"source": "sample_images"}}, "synthetic"),
])  # fmt: skip
def test_what_a_co_location_cannot_measure_is_refused_naming_colocate(extra: dict[str, Any], says: str) -> None:
    body = {**BASE, "colocate": {"models": ["b:1"]}, **extra}
    with pytest.raises(ValidationError) as info:
        JobSpec.model_validate(body)
    assert says in str(info.value) and info.value.errors()[0]["loc"][0] == "colocate", info.value.errors()


def result(index: int, served: int, beside: list[int], group: int, p99: float, rate: float) -> PointResult:
    pct = Percentiles(count=100, mean=p99 / 2, p50=p99 / 2, p90=p99, p95=p99, p99=p99, p999=p99, max=p99)
    point = expand(spec(colocate={"models": ["b:1"]}))[0].model_copy(
        update={"index": index, "served": served, "beside": beside, "group": group})
    env = {"follower_id": "f", "host": "h", "cpu_model": "c", "cpu_count": 2, "gpus": [], "python": "3",
           "benchfleet": "0", "backend_version": "1", "seed": 0}  # fmt: skip
    return PointResult(point=point, started_at=datetime.now(UTC), measured_s=5, requests=500, ok=500, errors=0,
                       offered_rate=100, achieved_rate=rate, latency_ms=pct, service_ms=pct, send_lag_ms=pct,
                       cold_start=None, valid=True, environment=env)  # fmt: skip


def test_the_matrix_puts_each_model_beside_each_other_against_itself_alone() -> None:
    now = datetime.now(UTC)
    job = JobView(id="j", name="co", state="succeeded", attempt=1, follower_id="f", spec=spec(colocate={"models": ["b:1"]}),
                  model_ref="a:1", points_total=4, points_done=4, estimate_s=1, created_at=now, updated_at=now,
                  history=[])  # fmt: skip
    points = [result(0, 0, [], 0, 4.0, 100), result(1, 1, [], 1, 2.0, 100), result(2, 0, [1], 2, 10.0, 90),
              result(3, 1, [0], 2, 3.0, 100)]  # fmt: skip
    found = matrix(job, points)
    assert found is not None and found.models == ["a:1", "b:1"] and found.cpus == "shared"
    beside = found.cell("a:1", "b:1")
    assert beside is not None and beside.p99_ms == 10.0 and beside.p99_ratio == 2.5 and beside.rate_ratio == 0.9
    assert found.cell("b:1", None) is not None and found.cell("b:1", "a:1").p99_ratio == 1.5  # type: ignore[union-attr]


def test_a_rerun_pins_every_model_to_the_version_it_ran() -> None:
    now = datetime.now(UTC)
    job = JobView(
        id="j",
        name="co",
        state="succeeded",
        attempt=1,
        follower_id="f",
        spec=spec(colocate={"models": ["b"]}),
        model_ref="a:3",
        points_total=4,
        points_done=4,
        estimate_s=1,
        created_at=now,
        updated_at=now,
        history=[],
        colocated_refs=["b:7"],
    )
    again = as_ran(job)
    assert again.model.ref == "a:3" and again.colocate is not None and again.colocate.models == ["b:7"]
    assert again.colocate.cpus == job.spec.colocate.cpus and again.seed == job.spec.seed  # type: ignore[union-attr]
    assert as_ran(job.model_copy(update={"colocated_refs": []})).colocate == job.spec.colocate  # stored before: as it was
