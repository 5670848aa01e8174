"""A closed loop's load is its users, everywhere a point's load is shown: rows, compare keys, the CLI table."""

from __future__ import annotations

import io
from datetime import UTC, datetime
from typing import Any

from rich.console import Console

from benchfleet.render import point_label, print_results
from common.spec.grid import expand
from common.spec.parse import parse_spec
from common.wire.analysis import LeaderboardRow
from common.wire.jobs import JobResults, JobView
from common.wire.results import Environment, PointResult
from leader.analysis.compare import point_key
from leader.analysis.leaderboard import to_row
from leader.store.leaderboard import row_from_result

CLOSED = {"name": "j", "model": "m:1", "load": {"pattern": "closed", "concurrency": [4, 16], "duration": "2s"}}


def _result(point: Any) -> PointResult:
    env = Environment(follower_id="f", host="h", cpu_model="cpu", cpu_count=2, gpus=[], python="3.11", benchfleet="0",
                      backend_version="1", seed=0)  # fmt: skip
    return PointResult(point=point, started_at=datetime.now(UTC), measured_s=2.0, requests=100, ok=100, errors=0,
                       offered_rate=0.0, achieved_rate=50.0, latency_ms=None, service_ms=None, send_lag_ms=None,
                       cold_start=None, valid=True, environment=env)  # fmt: skip


def _rows() -> list[dict[str, Any]]:
    docs = [_result(p).model_dump(mode="json") for p in expand(parse_spec(CLOSED))]
    return [row_from_result(job_id="j1", job_name="j", model="m:1", slo_p99_ms=None, attempt=1, result=d) for d in docs]


def test_closed_loop_rows_show_their_users_and_compare_tells_them_apart() -> None:
    rows = _rows()
    assert [to_row(r).load for r in rows] == ["4 users", "16 users"]
    assert [to_row(r).concurrency for r in rows] == [4, 16]
    assert point_key(rows[0]) != point_key(rows[1]) and point_key(rows[1]).endswith("|16 users")


def test_rows_stored_before_the_label_get_it_from_their_rate() -> None:
    old = {k: v for k, v in _rows()[0].items() if k not in ("load", "concurrency")} | {"pattern": "poisson", "rate": 200.0}
    assert to_row(old).load == "200 req/s"
    assert LeaderboardRow(id="x", job_id="j", job_name="j", attempt=1, index=0, model="m", backend="b", hardware="h",
                          follower_id="f", batch_size=1, pattern="closed", rate=0.0, concurrency=8).load == "8 users"


def test_the_cli_table_and_labels_show_users_not_rate_zero() -> None:
    points = expand(parse_spec(CLOSED))
    job = JobView(id="j1", name="j", state="succeeded", attempt=1, follower_id="f", spec=parse_spec(CLOSED),
                  model_ref="m:1", points_total=2, points_done=2, estimate_s=10.0, created_at=datetime.now(UTC),
                  updated_at=datetime.now(UTC), history=[])  # fmt: skip
    out = io.StringIO()
    print_results(Console(file=out, width=250), JobResults(job=job, points=[_result(p) for p in points]))
    assert "16 users" in out.getvalue() and "4 users" in out.getvalue()
    assert point_label(points[1]) == "onnxruntime b1 @ 16 users"


def test_a_row_names_the_device_that_served_the_point() -> None:
    """A CPU-served point on a GPU host ran on the CPU (it was once labelled with the host's first GPU)."""
    cpu_job = {"name": "j", "model": "m:1", "load": {"rate": 10}}
    gpu_job = cpu_job | {"server": {"device": "cuda:1"}}
    rows = {}
    for name, spec in (("cpu", cpu_job), ("gpu", gpu_job)):
        doc = _result(expand(parse_spec(spec))[0]).model_dump(mode="json")
        doc["environment"] |= {"gpus": ["NVIDIA H100 80GB HBM3", "NVIDIA L4"], "cpu_model": "AMD EPYC 9654"}
        rows[name] = row_from_result(job_id="j", job_name="j", model="m:1", slo_p99_ms=None, attempt=1, result=doc)
    assert rows["cpu"]["hardware"] == "AMD EPYC 9654"
    assert rows["gpu"]["hardware"] == "NVIDIA L4"  # its own GPU (cuda:1), not the host's first


def test_rows_carry_requests_and_samples_per_second() -> None:
    doc = _result(expand(parse_spec({"name": "j", "model": "m:1", "batch_sizes": [8], "load": {"rate": 10}}))[0])
    row = row_from_result(job_id="j", job_name="j", model="m:1", slo_p99_ms=None, attempt=1,
                          result=doc.model_dump(mode="json"))  # fmt: skip
    assert (row["throughput"], row["samples_per_s"]) == (50.0, 400.0)
    assert to_row(row).samples_per_s == 400.0


def test_a_finished_point_shows_what_it_delivered_not_its_last_live_window() -> None:
    """An overloaded point's last live window often closes with nothing answered yet ("0 req/s"); once it has finished,
    its progress line shows the point's own figures."""
    from benchfleet.cli import finished_note
    from common.wire.results import Percentiles, Reason

    point = expand(parse_spec({"name": "j", "model": "m:1", "load": {"rate": 1100}}))[0]
    result = _result(point).model_copy(update={
        "achieved_rate": 1000.0, "valid": False,
        "latency_ms": Percentiles(count=1, mean=1.0, p50=900.0, p90=1.0, p95=1.0, p99=1800.0, p999=1.0, max=1.0),
        "reasons": [Reason(code="server_saturated", text="the server could not keep up")],
    })  # fmt: skip
    assert finished_note(result) == " · 1000 req/s · p99 1800.0 ms · invalid: server_saturated"
