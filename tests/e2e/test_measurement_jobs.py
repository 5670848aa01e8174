"""Measurement-core features in real jobs (leader → follower → real ORT server): an uploaded trace replayed exactly,
closed-loop warm-up kept out of the statistics, two generator processes merged exactly, repeat runs on fresh
servers with their spread, and each point's quality scored against labelled data and gated on by compare."""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
import time

import httpx
import numpy as np
import onnxruntime as ort
import pytest
from rich.console import Console

from benchfleet.generate.digits import digits_mlp, digits_npz
from benchfleet.generate.modelgen import mlp_onnx
from benchfleet.render import print_results
from common.stats import decode
from common.wire.jobs import JobResults
from common.wire.records import decode as decode_records
from follower.servers.ort_server import converted
from tests.e2e.test_walking_skeleton import _wait_done

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def model(fleet) -> str:  # type: ignore[no-untyped-def]
    fleet.env["BENCHFLEET_FOLLOWER_METRICS_PORT"] = "-1"
    with fleet.client() as client:
        return client.upload_model(mlp_onnx(inputs=16, hidden=32), name="mlp-meas", version="1").ref


def _headers(fleet) -> dict[str, str]:  # type: ignore[no-untyped-def]
    return {"Authorization": f"Bearer {fleet.admin_token}"}


def _upload(fleet, content: bytes, fmt: str, name: str) -> dict:  # type: ignore[no-untyped-def, type-arg]
    response = httpx.post(f"{fleet.url}/api/v1/data", headers=_headers(fleet), data={"name": name, "format": fmt},
                          files={"file": (f"{name}.bin", content, "application/octet-stream")})  # fmt: skip
    assert response.status_code == 201, response.text
    return response.json()


def _run(fleet, yaml: str) -> JobResults:  # type: ignore[no-untyped-def]
    with fleet.client() as client:
        return _wait_done(client, client.submit_yaml(yaml).id, timeout_s=180)


def _records(fleet, results: JobResults, index: int = 0) -> dict[str, np.ndarray]:  # type: ignore[no-untyped-def]
    url = f"{fleet.url}/api/v1/jobs/{results.job.id}/points/{index}/records"
    response = httpx.get(url, headers=_headers(fleet), timeout=30)
    assert response.status_code == 200, response.text
    return decode_records(response.content)


def _only_follower(fleet, follower_id: str, env: dict[str, str] | None = None) -> None:  # type: ignore[no-untyped-def]
    """Stop every follower of this fleet and start `follower_id` (with `env`): it is the one the next job goes to."""
    for proc in fleet.followers:
        proc.stop()
    with fleet.client() as client:
        deadline = time.monotonic() + 30
        while any(f.state != "missing" for f in client.followers()) and time.monotonic() < deadline:
            time.sleep(0.2)
    saved = dict(fleet.env)
    fleet.env.update(env or {})
    try:
        fleet.start_follower(follower_id)
    finally:
        fleet.env.clear()
        fleet.env.update(saved)


def test_uploaded_trace_is_replayed_at_its_offsets_with_its_inputs(fleet, model: str) -> None:  # type: ignore[no-untyped-def]
    _only_follower(fleet, "meas-one")
    # 600 arrivals in 1.5 s with uneven gaps (bursts and pauses), each naming one of 8 uploaded request rows.
    rng = np.random.default_rng(3)
    offsets_ms = np.round(np.cumsum(rng.exponential(2.5, 600)), 3)
    offsets_ms -= offsets_ms[0]
    rows = rng.integers(0, 8, 600)
    csv = "t_ms,input\n" + "".join(f"{t:.3f},{r}\n" for t, r in zip(offsets_ms, rows, strict=True))
    trace = _upload(fleet, csv.encode(), "trace", "arrivals")
    buf = io.BytesIO()
    np.savez(buf, input=rng.standard_normal((8, 16)).astype(np.float32))
    data = _upload(fleet, buf.getvalue(), "npz", "rows")
    duration = float(offsets_ms[-1]) / 1000 + 0.5
    results = _run(fleet, f"""
name: trace-replay
model: {model}
load: {{pattern: trace, trace: {{dataset: {trace['id']}}}, duration: {duration}s, warmup: 0.2s}}
data: {{source: upload, id: {data['id']}}}
""")
    (row,) = results.points
    assert row.requests == 600 and row.ok == 600 and row.errors == 0, row.error_sample
    assert row.point.trace_dataset == trace["id"] and abs(row.point.rate - 600 / duration) < 1e-9
    # The generator count is decided and explained; a rate needing more cores than the generator has is invalid.
    plan = row.generator_plan
    assert plan is not None and plan.processes == row.generators == 1 and not plan.forced
    assert plan.saturated == (plan.cores_needed > plan.cores_available)
    assert ("generator_capacity" in [r.code for r in row.reasons]) == plan.saturated, (plan, row.reasons)
    assert any(plan.reason in r for r in row.invalid_reasons) == plan.saturated, (plan, row.invalid_reasons)
    # The generator thread's scheduling is recorded; a refused SCHED_FIFO carries its reason.
    sched = row.generator_scheduling
    assert sched is not None and (sched == "fifo" or (sched.startswith("nice ") and (
        "SCHED_FIFO refused: " not in sched or sched.split("SCHED_FIFO refused: ", 1)[1].startswith("E")))), sched
    rec = _records(fleet, results)
    measured_start = int(rec["start_ns"][0]) + 200_000_000
    measured = rec["intended_ns"][rec["intended_ns"] >= measured_start] - measured_start
    expected = np.round(offsets_ms.astype(np.float64) * 1e6).astype(np.int64)
    # Intended times are the trace's offsets to the nanosecond; warm-up replayed the trace's first 0.2 s before them.
    assert np.array_equal(measured, expected)
    assert len(rec["intended_ns"]) == 600 + int(np.sum(expected < 200_000_000))


def test_closed_loop_warm_up_is_not_measured(fleet, model: str) -> None:  # type: ignore[no-untyped-def]
    results = _run(fleet, f"""
name: closed-warm
model: {model}
load: {{pattern: closed, concurrency: 2, duration: 1s, warmup: 0.5s}}
""")
    (row,) = results.points
    rec = _records(fleet, results)
    measured_start = int(rec["start_ns"][0]) + 500_000_000
    warm = rec["sent_ns"] < measured_start
    assert warm.sum() > 0, "the warm-up sent requests"
    # Exactly the requests sent after the warm-up, and within the measured second, are the point's statistics: counts,
    # histogram and rate (a request the loop started right at the end is past it).
    measured = ~warm & (rec["intended_ns"] < measured_start + 1_000_000_000)
    assert row.requests == int(measured.sum()) and row.ok == row.requests, row.error_sample
    assert row.latency_hdr is not None and decode(row.latency_hdr).get_total_count() == row.ok
    assert abs(row.achieved_rate - row.ok / row.measured_s) < 1e-6 and row.measured_s == 1.0


def test_one_percentile_estimator_the_figures_everywhere_are_the_raw_records_nearest_ranks(fleet, model: str) -> None:  # type: ignore[no-untyped-def]
    """The point's percentiles, the leaderboard's and the export's p99, and compare's p99 are one figure: the nearest
    rank (the ceil(q*n)-th smallest) of the latencies in the point's own raw records, exactly. They used to be HDR's
    rank (rounded, at the bucket's top), and compare interpolated its own."""
    import json
    import math

    _only_follower(fleet, "meas-estimator")
    results = _run(fleet, f"""
name: one-estimator
model: {model}
load: {{allow_short: true, pattern: poisson, rate: 150, duration: 2s, warmup: 0.5s}}
seed: 4
""")
    (row,) = results.points
    rec = _records(fleet, results)
    start = int(rec["start_ns"][0]) + 500_000_000
    inside = (rec["intended_ns"] >= start) & (rec["intended_ns"] < start + 2_000_000_000) & (rec["status"] == 200)
    lat = np.sort(rec["done_ns"][inside] - rec["intended_ns"][inside])
    assert row.latency_ms is not None and row.latency_ms.count == len(lat) == row.ok, row.error_sample
    for name, q in {"p50": 0.5, "p90": 0.9, "p95": 0.95, "p99": 0.99, "p999": 0.999}.items():
        assert getattr(row.latency_ms, name) == pytest.approx(lat[math.ceil(round(q * len(lat), 9)) - 1] / 1e6, abs=1e-9), name
    p99 = row.latency_ms.p99
    assert row.latency_ms.max == pytest.approx(lat[-1] / 1e6, abs=1e-9)
    with fleet.client() as client:
        (board,) = client.leaderboard(filters=[f"job_id={results.job.id}"]).rows
        (exported,) = json.loads(client.export(results.job.id, "json"))
        (compared,) = client.compare(results.job.id, results.job.id).points
    assert board.p99_ms == exported["p99_ms"] == p99
    assert compared.test == "bootstrap+mannwhitney" and compared.a_p99_ms == compared.b_p99_ms == pytest.approx(p99, abs=1e-9)


def test_generators_setting_runs_two_processes_merged_exactly(fleet, model: str) -> None:  # type: ignore[no-untyped-def]
    _only_follower(fleet, "meas-two", {"BENCHFLEET_FOLLOWER_GENERATORS": "2"})
    results = _run(fleet, f"""
name: two-generators
model: {model}
load: {{pattern: poisson, rate: 300, duration: 2s, warmup: 0.5s}}
seed: 9
""")
    (row,) = results.points
    assert row.generators == 2 and row.generator_plan is not None
    assert row.generator_plan.processes == 2 and row.generator_plan.forced, row.generator_plan
    assert "2 processes set by the follower setting generators" in row.generator_plan.reason
    rec = _records(fleet, results)
    # The merged records are the whole schedule: warm-up (150) + measured (600), each request once, in order.
    assert len(rec["intended_ns"]) == 150 + 600 and np.all(np.diff(rec["intended_ns"]) >= 0)
    assert row.requests == 600 and row.ok == 600, row.error_sample
    # The point's histogram counts every measured request of both processes.
    assert row.latency_hdr is not None and decode(row.latency_hdr).get_total_count() == row.ok
    assert row.service_hdr is not None and decode(row.service_hdr).get_total_count() == row.ok


def test_repeats_with_fresh_servers_interleave_and_report_the_spread(fleet, model: str) -> None:  # type: ignore[no-untyped-def]
    _only_follower(fleet, "meas-repeats")
    results = _run(fleet, f"""
name: repeats
model: {model}
load: {{allow_short: true, pattern: poisson, rate: [150, 300], duration: 1s, warmup: 0.2s}}
repeats: {{count: 2, fresh_server: true}}
""")
    points = sorted(results.points, key=lambda r: r.point.index)
    # Round 1 runs both rates, then round 2 runs them again on a server started afresh (its cold start measured).
    assert [(r.point.repeat, r.point.config, r.point.rate) for r in points] == [
        (0, 0, 150.0), (0, 1, 300.0), (1, 0, 150.0), (1, 1, 300.0)]  # fmt: skip
    assert [r.cold_start is not None for r in points] == [True, False, True, False]
    assert [r.started_at for r in points] == sorted(r.started_at for r in points)
    by_config = {s.config: s for s in results.repeats}
    assert sorted(by_config) == [0, 1] and by_config[0].runs == [0, 2] and by_config[1].runs == [1, 3]
    for summary in results.repeats:
        p99 = summary.metrics[1]
        assert p99.values == [points[i].latency_ms.p99 if points[i].latency_ms else None for i in summary.runs]
        assert summary.verdict in ("repeatable", "noisy", "machine_changed") and summary.text
        assert p99.q is not None and p99.exceeds_ci == (p99.p_value is not None and p99.p_value < 0.025)
        assert summary.load == f"{points[summary.runs[0]].point.rate:g} req/s"
    out = io.StringIO()
    print_results(Console(file=out, width=250), results)
    assert "repeats: spread across runs" in out.getvalue() and by_config[0].verdict.replace("_", " ") in out.getvalue()


def test_a_batching_study_on_our_server_sweeps_batching_off_and_on_in_one_job(fleet, model: str) -> None:  # type: ignore[no-untyped-def]
    """The seed's dynamic-batching study on our ORT server, as one job: the same seeded load on a server without a
    batcher and on one whose batcher waits up to 20 ms for 16 requests, each configuration its own server start."""
    _only_follower(fleet, "meas-batching")
    results = _run(fleet, f"""
name: batching-study
model: {model}
batch_sizes: [1]
load: {{allow_short: true, pattern: poisson, rate: 150, duration: 1.5s, warmup: 0.3s}}
sweep: {{dynamic_batching: [null, {{max_batch_size: 16, max_queue_delay_us: 20000}}]}}
""")
    off, on = sorted(results.points, key=lambda r: r.point.config)
    assert off.point.server.dynamic_batching is None
    assert on.point.server.dynamic_batching is not None and on.point.server.dynamic_batching.max_batch_size == 16
    assert off.requests == on.requests > 0, "the same seeded schedule on both"
    for row in (off, on):
        assert row.errors == 0 and row.ok == row.requests, row.error_sample
        assert row.cold_start is not None, "each configuration starts its own server"
    assert off.server_stats is not None and on.server_stats is not None
    # Off: every request is its own run of the model. On: a 20 ms window merges several into one run, and they wait
    # for it in the batcher's queue (never past its delay: tests/integration/follower/test_batcher.py holds that).
    assert off.server_stats.executions == off.server_stats.inferences and off.server_stats.mean_batch == 1.0
    assert on.server_stats.mean_batch is not None and on.server_stats.mean_batch > 1.5, on.server_stats
    assert on.server_stats.executions < on.server_stats.inferences
    assert on.server_stats.queue_ms_mean is not None and off.server_stats.queue_ms_mean is not None
    assert on.server_stats.queue_ms_mean > off.server_stats.queue_ms_mean, (on.server_stats, off.server_stats)
    out = io.StringIO()
    print_results(Console(file=out, width=250), results)
    assert "dynamic_batching=off" in out.getvalue()
    assert "dynamic_batching=(max_batch_size=16,max_queue_delay_us=20000)" in out.getvalue()
    assert off.latency_ms is not None and on.latency_ms is not None
    print(f"our server, batching off: {off.server_stats} p50 {off.latency_ms.p50:.2f} ms; "
          f"on: {on.server_stats} p50 {on.latency_ms.p50:.2f} ms")


def test_quality_scores_each_points_served_answers_against_the_datas_labels(fleet, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A digits-trained model on ONNX Runtime as float32 and as INT8 (dynamic, and static calibrated on the job's own
    data) in one job, its held-out digits uploaded with their
    labels: every point carries its top-1 and top-3 accuracy over the first 500 samples, exactly the hits the same model
    in the same precision scores on the same batches in-process, with a 95% interval around it, and its agreement with
    the float32 configuration's answers; the leaderboard, the export and the CLI's quality sheet show them."""
    _only_follower(fleet, "meas-quality")
    model, offline = digits_mlp()
    held = np.load(io.BytesIO(digits_npz()))
    with fleet.client() as client:
        ref = client.upload_model(model, name="digits-mlp", version="1").ref
    data = _upload(fleet, digits_npz(), "npz", "digits-test")
    results = _run(
        fleet,
        f"""
name: digits-quality
model: {ref}
batch_sizes: [1, 7]
load: {{pattern: poisson, rate: 50, duration: 1s, warmup: 0.2s, allow_short: true}}
data: {{source: upload, id: {data["id"]}}}
quality: {{accuracy: {{top_k: 3}}, max_samples: 500, agreement: true}}
sweep: {{precision: [float32, int8_dynamic, int8_static]}}
""",
    )
    assert results.job.state == "succeeded", results.job.error
    path = tmp_path / "digits.onnx"
    path.write_bytes(model)
    calibration = tmp_path / "calibration.npz"  # what the follower writes: the data's first 256 samples as the input
    np.savez(calibration, input=held["input"][:256].astype(np.float32))
    sessions = {
        "float32": ort.InferenceSession(model),
        "int8_dynamic": ort.InferenceSession(converted(str(path), "int8_dynamic")),
        "int8_static": ort.InferenceSession(converted(str(path), "int8_static", str(calibration))),
    }
    truth = held["labels"][:500]
    configurations = sorted((r.point.server.precision, r.point.batch_size) for r in results.points)
    assert configurations == [(p, b) for p in ("float32", "int8_dynamic", "int8_static") for b in (1, 7)]

    def answers(precision: str, b: int) -> np.ndarray:
        """The same batches the follower sends: rows b*i .. b*i+b-1 (the last wraps), only the first 500 kept, by the
        model as that configuration's server converted it."""
        rows = [[(s + j) % len(truth) for j in range(b)] for s in range(0, 500, b)]
        return np.concatenate([sessions[precision].run(None, {"input": held["input"][idx]})[0] for idx in rows])[:500]

    for r in results.points:
        scores = answers(r.point.server.precision, r.point.batch_size)
        # Agreement with the reference (the first configuration: float32) at the same batch size.
        reference = answers("float32", r.point.batch_size)
        agreement = r.quality.agreement if r.quality else None
        assert agreement is not None and agreement.reference == "onnxruntime (default options)"
        assert agreement.top1.hits == int((scores.argmax(axis=1) == reference.argmax(axis=1)).sum()) >= 490
        assert agreement.max_abs_diff == pytest.approx(float(np.abs(scores - reference).max()), abs=1e-4)
        assert (agreement.max_abs_diff == 0.0) == (r.point.server.precision == "float32")  # INT8's answers move
        ranked = np.argsort(-scores, axis=1, kind="stable")
        assert r.quality is not None and r.quality.not_run == [], r.quality
        accuracy = r.quality.accuracy
        assert accuracy is not None and accuracy.topk is not None
        assert accuracy.top1.hits == int((ranked[:, 0] == truth).sum()) and accuracy.top1.samples == 500
        assert accuracy.k == 3 and accuracy.topk.hits == int((ranked[:, :3] == truth[:, None]).any(axis=1).sum())
        assert accuracy.top1.low < accuracy.top1.value < accuracy.top1.high and accuracy.topk.value >= accuracy.top1.value
        assert accuracy.top1.value > 0.9 and offline > 0.9  # a trained model: far above chance (0.1)
    # The leaderboard's rows and the job's export carry each point's top-1 accuracy with its interval and count.
    by_index = {r.point.index: r.quality.accuracy for r in results.points if r.quality and r.quality.accuracy}
    with fleet.client() as client:
        rows = client.leaderboard(filters=[f"job_id:{results.job.id}"], sort="index").rows
        exported = list(csv.DictReader(io.StringIO(client.export(results.job.id, "csv").decode())))
    assert [r.index for r in rows] == [0, 1, 2, 3, 4, 5] and len(exported) == 6
    for row, line in zip(rows, exported, strict=True):
        top1 = by_index[row.index].top1
        assert (row.accuracy, row.accuracy_low, row.accuracy_high, row.accuracy_samples) == (top1.value, top1.low, top1.high, 500)
        assert float(line["accuracy"]) == top1.value and float(line["accuracy_low"]) == top1.low
    out = io.StringIO()
    print_results(Console(file=out), results)
    text = out.getvalue()
    assert "quality: accuracy of the served answers" in text
    for r in results.points:
        assert r.quality is not None and r.quality.accuracy is not None and r.quality.accuracy.top1.points() in text


def test_regression_scores_each_points_values_against_the_datas_true_values(fleet, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Error against targets: the digits model's own float32 outputs uploaded as each sample's true values (reference
    outputs), the model served as float32 and as INT8. Each point's error is the in-process model's at batch 1 against
    those values (float32: none but rounding; INT8: what quantising moved), as a mean absolute error with its interval,
    RMSE and the largest error; the CLI's quality sheet shows it."""
    _only_follower(fleet, "meas-regression")
    model, _ = digits_mlp()
    x = np.load(io.BytesIO(digits_npz()))["input"][:200].astype(np.float32)
    reference = ort.InferenceSession(model).run(None, {"input": x})[0]
    content = io.BytesIO()
    np.savez(content, input=x, targets=reference)
    with fleet.client() as client:
        ref = client.upload_model(model, name="digits-reg", version="1").ref
    data = _upload(fleet, content.getvalue(), "npz", "digits-reference-outputs")
    assert data["fields"] == ["input", "targets"]
    results = _run(
        fleet,
        f"""
name: digits-regression
model: {ref}
load: {{pattern: poisson, rate: 50, duration: 1s, warmup: 0.2s, allow_short: true}}
data: {{source: upload, id: {data["id"]}}}
quality: {{regression: true, max_samples: 200}}
sweep: {{precision: [float32, int8_dynamic]}}
""",
    )
    assert results.job.state == "succeeded", results.job.error
    path = tmp_path / "digits.onnx"
    path.write_bytes(model)
    maes = {}
    for r in results.points:
        precision = r.point.server.precision
        session = ort.InferenceSession(model if precision == "float32" else converted(str(path), precision))
        served = np.concatenate([session.run(None, {"input": x[i : i + 1]})[0] for i in range(len(x))])
        diff = np.abs(served.astype(np.float64) - reference)
        error = r.quality.error if r.quality else None
        assert r.quality is not None and r.quality.accuracy is None and r.quality.not_run == [], r.quality
        assert error is not None and (error.samples, error.values) == (200, 10)
        assert error.mae == pytest.approx(float(diff.mean()), abs=1e-6)
        assert error.max_abs == pytest.approx(float(diff.max()), abs=1e-6)
        assert error.mae_low is not None and error.mae_high is not None and error.mae_low <= error.mae <= error.mae_high
        maes[precision] = error.mae
    assert maes["float32"] < 1e-5 < maes["int8_dynamic"], maes  # rounding only, against what INT8 moved
    out = io.StringIO()
    print_results(Console(file=out, width=200), results)
    assert "quality: accuracy and error of the served answers" in out.getvalue() and "error against the targets" in out.getvalue()
    assert all(r.quality and r.quality.error and r.quality.error.shown() in out.getvalue() for r in results.points)


def test_compare_exits_5_on_an_accuracy_fall_beyond_its_interval_and_not_on_one_inside_it(fleet, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The digits model against one trained for fewer steps on the same data: 60 steps scores within a sample of 100
    steps (inside the interval: no regression), 5 steps about ten points lower (a regression: `compare` exits 5). The
    loads are short on purpose (every point invalid): accuracy is judged all the same, latency decides nothing."""
    _only_follower(fleet, "meas-compare")
    data = _upload(fleet, digits_npz(), "npz", "digits-compare")
    jobs = {}
    with fleet.client() as client:
        for steps in (100, 60, 5):
            ref = client.upload_model(digits_mlp(steps=steps)[0], name="digits-steps", version=str(steps)).ref
            jobs[steps] = _run(
                fleet,
                f"""
name: digits-{steps}
model: {ref}
load: {{pattern: poisson, rate: 50, duration: 1s, warmup: 0.2s, allow_short: true}}
data: {{source: upload, id: {data["id"]}}}
quality: {{accuracy: {{top_k: 1}}, max_samples: 540}}
""",
            ).job.id
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "BENCHFLEET_URL": fleet.url,
        "BENCHFLEET_TOKEN": fleet.admin_token,
        "PYTHONPATH": os.environ.get("PYTHONPATH", ""),
    }
    for steps, rc, verdict in ((60, 6, "unchanged"), (5, 5, "regression")):
        argv = [sys.executable, "-m", "benchfleet", "compare", jobs[100], jobs[steps], "--quality-threshold", "0.005"]
        shown = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60, check=False)
        assert shown.returncode == rc, shown.stdout + shown.stderr
        row = next(line for line in shown.stdout.splitlines() if line.strip().startswith("top-1 accuracy"))
        assert row.split()[-1] == verdict and "newcombe" in row, shown.stdout
        answer = json.loads(subprocess.run([*argv, "--json"], capture_output=True, text=True, env=env, timeout=60).stdout)
        (point,) = answer["points"]
        assert point["verdict"] == "invalid" and point["quality"]["verdict"] == verdict, point
        low, high = point["quality"]["ci_low"], point["quality"]["ci_high"]
        assert (low < 0 < high) == (verdict == "unchanged") and point["quality"]["a_samples"] == 540
