"""Live progress end to end: a running job's windows reach the leader over gRPC and show on its progress endpoint."""

from __future__ import annotations

import grpc
import httpx
import pytest

from benchfleet.generate.modelgen import mlp_onnx
from common.wire.jobs import TERMINAL_STATES, JobState
from protos import telemetry_pb2, telemetry_pb2_grpc
from tests.e2e.test_walking_skeleton import _wait_until

pytestmark = pytest.mark.e2e

JOB = """
name: progress
model: mlp-progress:1
backends: [onnxruntime]
batch_sizes: [1]
load: {pattern: poisson, rate: 100, duration: 5s, warmup: 0.5s, window: 0.5s}
"""


def _progress(fleet, job_id: str) -> dict:  # type: ignore[no-untyped-def]
    reply = httpx.get(f"{fleet.url}/api/v1/jobs/{job_id}/progress", headers={"Authorization": f"Bearer {fleet.admin_token}"})
    assert reply.status_code == 200, reply.text
    return reply.json()


def test_running_job_shows_windows_while_it_runs(fleet) -> None:  # type: ignore[no-untyped-def]
    fleet.env["BENCHFLEET_FOLLOWER_METRICS_PORT"] = "-1"
    fleet.start_follower("f-progress")
    with fleet.client() as client:
        client.upload_model(mlp_onnx(), name="mlp-progress", version="1")
        job = client.submit_yaml(JOB)
        assert _progress(fleet, job.id)["points"] == []  # nothing before it runs
        # While the job is still running, its progress already carries closed windows of point 0.
        seen = _wait_until(
            lambda: (p := _progress(fleet, job.id))["state"] == JobState.running.value and p["points"] and p, 60,
            "windows on the progress endpoint while the job runs",
        )
        point = seen["points"][0]
        assert point["index"] == 0 and seen["attempt"] == 1 and seen["follower_id"] == "f-progress"
        first = point["windows"][0]
        assert first["t_s"] == 0.0 and first["duration_s"] == 0.5 and first["requests"] > 0 and first["p99_ms"] > 0
        done = _wait_until(lambda: (j := client.job(job.id)).state in TERMINAL_STATES and j, 90, "the job to end")
        assert done.state == JobState.succeeded, done.error
    final = _progress(fleet, job.id)
    # More windows arrived after the first look (the stream went on), bounded by the 5 s measured part.
    assert len(seen["points"][0]["windows"]) <= len(final["points"][0]["windows"]) <= 10
    assert len(final["points"][0]["windows"]) >= 6
    assert final["dropped"] == 0


def test_telemetry_refuses_bad_credentials_and_stale_attempts(fleet) -> None:  # type: ignore[no-untyped-def]
    port = fleet.env["BENCHFLEET_LEADER_GRPC_PORT"]
    report = telemetry_pb2.ProgressReport(job_id="nope", attempt=1, follower_id="f-progress", point_index=0,
                                          windows=[telemetry_pb2.Window(t_s=0, duration_s=1, requests=1, ok=1)])  # fmt: skip
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = telemetry_pb2_grpc.TelemetryStub(channel)

        def code(token: str, request: telemetry_pb2.ProgressReport = report) -> grpc.StatusCode:
            with pytest.raises(grpc.RpcError) as caught:
                stub.Report(request, timeout=10, metadata=[("authorization", f"Bearer {token}")])
            return caught.value.code()

        assert code("x" * 32) == grpc.StatusCode.UNAUTHENTICATED
        # The join token only registers.
        assert code(fleet.env["BENCHFLEET_FOLLOWER_TOKEN"]) == grpc.StatusCode.UNAUTHENTICATED
        assert code(fleet.admin_token) == grpc.StatusCode.NOT_FOUND
        bad = telemetry_pb2.ProgressReport(job_id="nope", attempt=1, follower_id="f", point_index=-1)
        assert code(fleet.admin_token, bad) == grpc.StatusCode.INVALID_ARGUMENT
        with fleet.client() as client:
            ended = [j for j in client.jobs() if j.state in TERMINAL_STATES]
        if ended:  # a finished attempt takes no more progress
            stale = telemetry_pb2.ProgressReport(job_id=ended[0].id, attempt=1, follower_id="f-progress", point_index=0)
            assert code(fleet.admin_token, stale) == grpc.StatusCode.FAILED_PRECONDITION
