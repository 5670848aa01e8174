"""A point's measurement is plan → drive → judge → result: the pure steps called alone, on crafted records."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest

from common.spec.grid import expand
from common.spec.parse import parse_spec
from common.wire.models import ModelMeta, TensorSpec
from common.wire.results import PointResult, Reason
from follower.backends import get_backend
from follower.loadgen.records import LoadRecords
from follower.point.context import HostFacts, PointContext, ServerRun
from follower.point.drive import Driven
from follower.point.judge import judge
from follower.point.plan import plan_point
from follower.point.result import point_result
from follower.protocols import Endpoint

MS = 1_000_000
MODEL = ModelMeta(name="m", version="1", format="onnx", inputs=[TensorSpec(name="x", datatype="FP32", shape=[-1, 4])],
                  outputs=[TensorSpec(name="y", datatype="FP32", shape=[-1, 2])], sha256="0" * 64, size_bytes=1,
                  created_at=datetime.now(UTC))  # fmt: skip


def _context(point_server: object = None) -> PointContext:
    # A backend object that is never started: plan and judge only read what it speaks.
    run = ServerRun(model=MODEL, model_path=Path("m.onnx"), workdir=Path("unused"), host_facts=HostFacts(follower_id="f"))
    backend = get_backend("onnxruntime", server=point_server)
    endpoint = Endpoint("kserve-http", "http://127.0.0.1:1", "m")
    return PointContext(run=run, backend=backend, endpoint=endpoint, backend_version="test")


def _point(**load: object):  # type: ignore[no-untyped-def]
    spec = parse_spec({"name": "j", "model": "m:1", "load": {"rate": 1000, "duration": "1s", "warmup": "0.5s", **load}})
    return expand(spec)[0]


def _answered(plan_offsets: np.ndarray, start_ns: int, lag_ns: int = 50_000) -> LoadRecords:
    rec = LoadRecords.allocate(start_ns, plan_offsets)
    rec.sent_ns[:] = rec.intended_ns + lag_ns
    rec.first_byte_ns[:] = rec.intended_ns + 2 * MS - 1000
    rec.done_ns[:] = rec.intended_ns + 2 * MS
    rec.status[:] = 200
    rec.cpu_s, rec.wall_s = 0.2, 1.5
    rec.loop_lag_ns = np.full(10, 100_000, dtype=np.int64)
    return rec


def test_plan_puts_a_separate_warm_up_stream_before_the_exact_measured_count() -> None:
    point = _point(pattern="constant")
    plan = plan_point(point, _context(point.server))
    assert (plan.warmup_ns, plan.duration_ns) == (500 * MS, 1000 * MS)
    warm = plan.offsets_ns[plan.offsets_ns < plan.warmup_ns]
    measured = plan.offsets_ns[plan.offsets_ns >= plan.warmup_ns]
    assert len(measured) == 1000 and len(warm) == 500
    assert bool(np.all(np.diff(plan.offsets_ns) >= 0))
    assert plan.bodies and plan.body_index is None and not plan.closed
    assert plan.generator_plan is not None and plan.processes >= 1
    assert all(r.code == "generator_capacity" for r in plan.reasons)


def test_judge_alone_gives_a_valid_verdict_on_healthy_records_and_result_carries_it() -> None:
    point = _point(pattern="constant")
    ctx = _context(point.server)
    plan = plan_point(point, ctx)
    rec = _answered(plan.offsets_ns, 10**12)
    judged = judge(plan, Driven(rec, []), ctx)
    assert judged.reasons == list(plan.reasons)
    assert judged.summary.requests == 1000 and judged.measured_ns == plan.duration_ns
    result = point_result(plan, Driven(rec, []), judged, ctx, started_at=datetime.now(UTC), cold_start=None)
    assert result.valid == (not plan.reasons) and result.requests == 1000
    assert result.environment.follower_id == "f" and result.environment.backend_version == "test"


def test_judge_names_what_held_the_host_beside_a_send_lag_reason_and_keeps_the_code() -> None:
    point = _point(pattern="constant")
    ctx = _context(point.server)
    plan = plan_point(point, ctx)
    rec = _answered(plan.offsets_ns, 10**12, lag_ns=3 * MS)
    lagged = judge(plan, Driven(rec, [], steal=0.05), ctx)
    lag = [r for r in lagged.reasons if r.code == "send_lag"]
    assert len(lag) == 1 and "hypervisor steal took 5.0%" in lag[0].text
    quiet = judge(plan, Driven(rec, [], steal=0.001), ctx)
    assert "steal" not in next(r.text for r in quiet.reasons if r.code == "send_lag")


def test_a_server_reason_from_driving_invalidates_the_point() -> None:
    point = _point(pattern="constant")
    ctx = _context(point.server)
    plan = plan_point(point, ctx)
    died = Reason(code="server_died", text="server process died during the point")
    judged = judge(plan, Driven(_answered(plan.offsets_ns, 10**12), [died]), ctx)
    assert died in judged.reasons
    assert not point_result(plan, Driven(_answered(plan.offsets_ns, 10**12), [died]), judged, ctx,
                            started_at=datetime.now(UTC), cold_start=None).valid  # fmt: skip


@pytest.mark.parametrize(("text", "code"), [
    ("send lag p99 2.000 ms exceeds 1 ms: the generator (or its host) could not send on time", "send_lag"),
    ("only 12 requests completed; a p99 needs >= 459 (raise duration or rate)", "too_few"),
    ("server process died during the point", "server_died"),
    ("something no rule says", "other"),
])  # fmt: skip
def test_results_stored_with_text_reasons_read_back_with_codes(text: str, code: str) -> None:
    point = _point(pattern="constant")
    ctx = _context(point.server)
    plan = plan_point(point, ctx)
    rec = _answered(plan.offsets_ns, 10**12)
    stored = point_result(plan, Driven(rec, []), judge(plan, Driven(rec, []), ctx), ctx, started_at=datetime.now(UTC),
                          cold_start=None).model_dump(mode="json")  # fmt: skip
    old = {k: v for k, v in stored.items() if k != "reasons"} | {"valid": False, "invalid_reasons": [text]}
    read = PointResult.model_validate(old)
    assert read.reasons == [Reason(code=code, text=text)] and read.invalid_reasons == [text]
    again = read.model_dump(mode="json")
    assert again["invalid_reasons"] == [text] and again["reasons"] == [{"code": code, "text": text}]
    assert PointResult.model_validate(again) == read


def test_a_stall_in_a_point_without_a_stability_rule_is_named_with_its_window() -> None:
    # 10 s at 200 req/s answered in 2 ms, except that the server stalls at 5 s and answers everything sent in that
    # second at 9.2 s: p99 of the point ~4 s, p50 2 ms (once valid, with `stable` shown nowhere).
    point = _point(pattern="constant", rate=200, duration="10s", warmup="0s")
    ctx = _context(point.server)
    plan = plan_point(point, ctx)
    rec = _answered(plan.offsets_ns, 10**12)
    rec.cpu_s, rec.wall_s = 1.0, 10.0
    stalled = (rec.intended_ns >= rec.start_ns + 5 * 10**9) & (rec.intended_ns < rec.start_ns + 6 * 10**9)
    rec.done_ns[stalled] = rec.start_ns + 9_200_000_000
    rec.first_byte_ns[stalled] = rec.done_ns[stalled] - 1000
    judged = judge(plan, Driven(rec, []), ctx)
    (unsteady,) = [r for r in judged.reasons if r.code == "unsteady"]
    assert "window 5-6 s" in unsteady.text, unsteady.text
    # A noisy host's spikes (a 30 ms answer now and then among 2 ms ones) are no stall.
    rec = _answered(plan.offsets_ns, 10**12)
    rec.cpu_s, rec.wall_s = 1.0, 10.0
    rec.done_ns[::97] += 30_000_000
    assert "unsteady" not in [r.code for r in judge(plan, Driven(rec, []), ctx).reasons]


def test_the_cap_follows_the_load_unless_the_spec_sets_one() -> None:
    from follower.loadgen.cap import MIN_CAP, little_cap

    auto = _point(pattern="constant")
    ctx = _context(auto.server)
    plan = plan_point(auto, dataclasses.replace(ctx, run=dataclasses.replace(ctx.run, max_in_flight=1000)))
    assert (plan.cap, plan.follow_load) == (1000, True)
    fixed = _point(pattern="constant", max_concurrency=64)
    assert (plan_point(fixed, _context(fixed.server)).cap, plan_point(fixed, _context(fixed.server)).follow_load) == (64, False)
    # Little's law with headroom: 1,000 req/s at 50 ms in the system need 50 in flight; twice that, 25 more for the
    # requests a 25 ms stall holds, and 5 σ of Poisson bursts above those 125 (56), within the bounds.
    rec = _answered(plan.offsets_ns, 10**12)
    rec.done_ns[:] = rec.sent_ns + 50 * MS
    assert little_cap(rec, int(rec.done_ns.max()), rate=1000, bound=4096) == 181
    assert little_cap(rec, int(rec.done_ns.max()), rate=1000, bound=80) == 80
    # An instant server: the stall's room decides (25 + 25 at 1,000 req/s); a light load gets the floor.
    rec.done_ns[:] = rec.sent_ns + 1000
    assert little_cap(rec, int(rec.done_ns.max()), rate=1000, bound=4096) == 51
    assert little_cap(rec, int(rec.done_ns.max()), rate=100, bound=4096) == MIN_CAP


@pytest.mark.parametrize(("cores", "timer"), [({0, 1}, "busy"), ({0}, "yield")])
def test_busy_wait_runs_the_busy_tail_where_the_generator_has_a_core_and_the_result_says_what_timed_the_sends(
    monkeypatch: pytest.MonkeyPatch, cores: set[int], timer: str
) -> None:
    import follower.host.cpuplan as cpuplan

    monkeypatch.setattr(cpuplan.os, "sched_getaffinity", lambda pid: cores)
    point = _point(pattern="constant", busy_wait=True)
    ctx = _context(point.server)
    plan = plan_point(point, ctx)
    assert plan.timer == timer
    rec = _answered(plan.offsets_ns, 10**12)
    rec.timer, rec.spin_s, rec.wake_margin_ns = timer, 0.15, 250_000 if timer == "busy" else 42_000
    judged = judge(plan, Driven(rec, []), ctx)
    said = point_result(plan, Driven(rec, []), judged, ctx, started_at=datetime.now(UTC), cold_start=None).generator_timer
    if timer == "busy":
        assert said == (
            "busy-wait tail of 250 µs before each send on the generator's own core; 10.0% of the run spinning before sends"
        )
    else:
        assert said == (
            "timerfd waking 42 µs ahead (its recent wake-ups' lateness, 90th percentile); 10.0% of the run spinning before "
            "sends; busy_wait was asked, but this follower has no core to give its generator"
        )
