"""One benchmark travels the whole way: YAML over HTTP → leader → Celery → follower → real ORT server → PerfDB → user."""

from __future__ import annotations

import os
import signal
import time

import psutil
import pytest

from benchfleet.client import BenchfleetClient
from benchfleet.generate.modelgen import mlp_onnx
from common.wire.jobs import TERMINAL_STATES, JobResults, JobState
from tests.verdicts import assert_verdict_follows_figures

pytestmark = pytest.mark.e2e


def _wait_until(predicate, timeout_s: float, what: str):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")


def _wait_done(client: BenchfleetClient, job_id: str, timeout_s: float = 120) -> JobResults:
    try:
        job = _wait_until(lambda: (j := client.job(job_id)).state in TERMINAL_STATES and j, timeout_s, f"job {job_id} to end")
    except AssertionError as exc:  # where the job stood, for a run that cannot be repeated (CI's)
        raise AssertionError(f"{exc}; the job then: {client.job(job_id).model_dump_json()[:3000]}") from None
    assert job.state == JobState.succeeded, f"job ended {job.state}: {job.error}"
    return client.results(job_id)


@pytest.fixture(scope="module")
def model(fleet) -> str:  # type: ignore[no-untyped-def]
    with fleet.client() as client:
        meta = client.upload_model(mlp_onnx(), name="mlp-e2e", version="1")
    return meta.ref


def test_yaml_over_http_gives_a_result_with_p99_and_a_true_verdict(fleet, model: str) -> None:  # type: ignore[no-untyped-def]
    fleet.start_follower("f-main")
    job_yaml = f"""
name: e2e-smoke
model: {{ref: {model}}}
backends: [onnxruntime]
batch_sizes: [1]
load: {{pattern: poisson, rate: 200, duration: 3s, warmup: 1s}}
slo: {{p99_ms: 500}}
seed: 42
"""
    with fleet.client() as client:
        job = client.submit_yaml(job_yaml)
        assert job.state in {JobState.queued, JobState.assigned}
        results = _wait_done(client, job.id)
    assert results.job.attempt == 1 and results.job.points_done == 1
    [point] = results.points
    assert point.point.rate == 200 and point.point.seed == (42 * 1_000_003) % 2**32
    assert point.requests >= 459, "a p99 claim needs at least 459 samples"
    assert point.errors == 0
    assert point.latency_ms is not None and point.service_ms is not None and point.send_lag_ms is not None
    assert 0 < point.latency_ms.p50 <= point.latency_ms.p99 <= point.latency_ms.p999 <= point.latency_ms.max
    # Latency from the intended time can only be longer than service time from the actual send.
    assert point.latency_ms.p50 >= point.service_ms.p50
    assert point.cold_start is not None and 0 < point.cold_start.to_ready_s <= point.cold_start.to_first_answer_s
    # The verdict is the judge's rules applied to the point's own figures, whatever the host did. (It was asserted
    # valid unless the generator stalled, with the rate within 2% of 200: a run whose server process stalled filled the
    # automatic in-flight cap instead, rightly named. Whether such a point is valid on a quiet host is now
    # bench/repeatability.py's claim, each run's verdict in its RESULT line; the judge's rules on recorded records are
    # tests/integration/follower/test_capacity.py's.)
    assert_verdict_follows_figures(point)
    if not point.valid:
        print(f"point invalid on this host: {point.invalid_reasons}")
    assert point.environment.follower_id == "f-main" and point.environment.seed == point.point.seed


def test_killing_the_follower_mid_job_does_not_lose_the_job(fleet, model: str) -> None:  # type: ignore[no-untyped-def]
    victim = fleet.start_follower("f-crash")
    job_yaml = f"""
name: e2e-crash
model: {{ref: {model}}}
backends: [onnxruntime]
batch_sizes: [1, 2]
load: {{allow_short: true, pattern: constant, rate: 100, duration: 3s, warmup: 0.5s}}
"""
    with fleet.client() as client:
        # Only f-crash may take it: f-main (if running) is stopped for this test.
        for proc in fleet.followers:
            if proc is not victim:
                proc.stop()
        _wait_until(
            lambda: all(f.state == "missing" or f.info.follower_id == "f-crash" for f in client.followers()),
            30,
            "other followers to go missing",
        )
        job = client.submit_yaml(job_yaml)
        _wait_until(lambda: client.job(job.id).state == JobState.running, 60, "the job to start running")
        os.killpg(victim.pid, signal.SIGKILL)  # the agent and everything in its process group
        victim.stop()
        fleet.start_follower("f-crash")
        results = _wait_done(client, job.id, timeout_s=120)
    assert results.job.attempt == 2, results.job.history
    reasons = [h.reason or "" for h in results.job.history]
    assert any("f-crash" in r for r in reasons), reasons
    assert [p.point.index for p in results.points] == [0, 1], "exactly one result per point of the final attempt"
    assert all(p.requests > 0 for p in results.points)
    # The model server the killed agent had started must not outlive it (it watches its parent).
    marker = str(fleet.workdir / "f-crash")
    _wait_until(lambda: not _servers_under(marker), 20, "the orphaned model server to exit")


def _servers_under(marker: str) -> list[int]:
    """Pids of model-server processes whose command line points into a follower's work dir."""
    pids = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        cmdline = " ".join(proc.info["cmdline"] or [])
        if "follower.servers." in cmdline and marker in cmdline:
            pids.append(proc.info["pid"])
    return pids
