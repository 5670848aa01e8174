"""Compare's point key holds every dimension that tells two points of one job apart (a co-location job's model alone
and beside another, a sweep's server options, several models or hardware classes) and leaves out what a comparison
of two jobs compares (job A on one GPU class, job B on another)."""

from __future__ import annotations

import asyncio
from typing import Any

from leader.analysis.compare import compare_rows, point_key, varying
from leader.store.leaderboard import row_from_result


def _row(
    job: str,
    index: int,
    *,
    hardware: str = "cpu",
    served: int = 0,
    beside: list[int] | None = None,
    server: dict[str, Any] | None = None,
    colocated: list[str] | None = None,
) -> dict[str, Any]:
    point = {
        "index": index,
        "backend": "onnxruntime",
        "batch_size": 1,
        "pattern": "poisson",
        "rate": 100.0,
        "served": served,
        "beside": beside or [],
        "server": server or {},
    }
    result = {
        "point": point,
        "environment": {"cpu_model": hardware, "follower_id": "f"},
        "latency_ms": {"p99": 10.0 + index},
        "valid": True,
    }
    row = row_from_result(job_id=job, job_name=job, model="a:1", slo_p99_ms=None, attempt=1, result=result, colocated=colocated)
    return row


def test_a_co_location_jobs_alone_and_beside_points_keep_their_own_keys() -> None:
    rows = [
        _row("j", 0, colocated=["b:1"]),
        _row("j", 1, served=0, beside=[1], colocated=["b:1"]),
        _row("j", 2, served=1, colocated=["b:1"]),
        _row("j", 3, served=1, beside=[0], colocated=["b:1"]),
    ]
    assert [r["role"] for r in rows] == ["a:1 alone", "a:1 beside b:1", "b:1 alone", "b:1 beside a:1"]
    keys = {point_key(r, varying(rows)) for r in rows}
    assert len(keys) == 4


def test_a_sweep_over_server_options_keeps_each_configuration() -> None:
    rows = [_row("j", 0, server={"threads": 1}), _row("j", 1, server={"threads": 2}), _row("j", 2)]
    assert rows[2]["options"] == "" and rows[0]["options"] == '{"threads":1}'
    assert varying(rows) == ("options",) and len({point_key(r, varying(rows)) for r in rows}) == 3


def test_two_jobs_on_two_hardware_classes_are_compared_point_by_point() -> None:
    a, b = [_row("a", 0, hardware="A100")], [_row("b", 0, hardware="H100")]
    assert varying(a, b) == ()  # each job holds its class constant: that is what is compared

    async def no_records(_row: dict[str, Any]) -> None:
        return None

    compared = asyncio.run(compare_rows(a, b, a="a", b="b", load_latencies=no_records))
    (point,) = compared.points
    assert (point.a_index, point.b_index) == (0, 0) and point.verdict != "missing"
    # Within a job, two classes are two experiments.
    mixed = [_row("m", 0, hardware="A100"), _row("m", 1, hardware="H100")]
    assert varying(mixed) == ("hardware",) and len({point_key(r, varying(mixed)) for r in mixed}) == 2
