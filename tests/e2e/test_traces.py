"""A job's way as one trace across leader and follower processes: an in-process OTLP/HTTP collector receives the spans
both export (submit, place, attempt, claim, server start, each point, upload, finish), all of the job's trace id, which
the job shows and the follower's log lines carry; with `propagate_trace`, every request reaches the server under test
with its point span's traceparent, so an instrumented server's spans would join the same trace."""

from __future__ import annotations

import json
import os
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from benchfleet.stack import LocalStack
from common.procs import SupervisedProcess, free_port, http_ready
from tests.e2e.test_walking_skeleton import _wait_done

pytestmark = pytest.mark.e2e

SERVER = Path(__file__).resolve().parents[1] / "integration" / "follower" / "capacity_server.py"


@dataclass(frozen=True)
class Received:
    service: str
    name: str
    trace_id: str
    span_id: str
    parent_id: str


class Collector:
    """An OTLP/HTTP trace receiver (POST /v1/traces, protobuf), keeping every span it is sent."""

    def __init__(self) -> None:
        self.spans: list[Received] = []
        self.lock = threading.Lock()
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                with collector.lock:
                    for resource in request.resource_spans:
                        attrs = {a.key: a.value.string_value for a in resource.resource.attributes}
                        for scope in resource.scope_spans:
                            for s in scope.spans:
                                collector.spans.append(
                                    Received(
                                        attrs.get("service.name", ""),
                                        s.name,
                                        s.trace_id.hex(),
                                        s.span_id.hex(),
                                        s.parent_span_id.hex(),
                                    )
                                )
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1/traces"
        self.thread = threading.Thread(target=self.server.serve_forever, name="otlp-collector", daemon=True)
        self.thread.start()

    def of_trace(self, trace_id: str) -> list[Received]:
        with self.lock:
            return [s for s in self.spans if s.trace_id == trace_id]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def collector() -> Iterator[Collector]:
    found = Collector()
    yield found
    found.close()


@pytest.fixture(scope="module")
def traced_fleet(
    mongo_service, redis_service, collector: Collector, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LocalStack]:  # type: ignore[no-untyped-def]
    """A leader and a follower exporting their spans to the collector (flushed every 100 ms)."""
    base_env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": os.environ.get("PYTHONPATH", "")}
    env = {
        "BENCHFLEET_LEADER_MISSING_AFTER_S": "3",
        "BENCHFLEET_FOLLOWER_HEARTBEAT_INTERVAL_S": "0.5",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": collector.url,
        "OTEL_BSP_SCHEDULE_DELAY": "100",
    }
    stack = LocalStack(
        tmp_path_factory.mktemp("traced"),
        mongo_uri=mongo_service.url,
        redis_url=redis_service.url,
        db_name=f"e2e_{uuid.uuid4().hex[:8]}",
        base_env=base_env,
        env=env,
    )
    with stack:
        stack.start_leader()
        stack.start_follower("f-traced")
        yield stack


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    port = free_port()
    argv = [sys.executable, str(SERVER), "--port", str(port), "--service-ms", "1", "--workers", "0"]
    log = tmp_path_factory.mktemp("traced-server") / "server.log"
    with SupervisedProcess(argv, name="server under test", log_path=log) as proc:
        proc.wait_ready(http_ready(f"http://127.0.0.1:{port}/ready"), timeout_s=30)
        yield f"http://127.0.0.1:{port}"


@pytest.mark.timeout(300)
def test_a_jobs_way_is_one_trace_across_leader_follower_and_the_server(traced_fleet, collector: Collector, server: str) -> None:  # type: ignore[no-untyped-def]
    with traced_fleet.client() as client:
        job = client.submit_yaml(f"""
name: traced
model: traced-endpoint
inputs: [{{name: input, datatype: FP32, shape: [-1, 4]}}]
target: {{url: "{server}", protocol: kserve-http}}
load: {{allow_short: true, pattern: constant, rate: 20, duration: 1s, warmup: 0s}}
propagate_trace: true
""")
        trace_id = job.trace_id
        assert trace_id is not None and len(trace_id) == 32
        _wait_done(client, job.id, timeout_s=200)
        assert client.job(job.id).trace_id == trace_id

    wanted = {
        ("benchfleet-leader", "job.submit"),
        ("benchfleet-leader", "job.place"),
        ("benchfleet-leader", "job.finish"),
        ("benchfleet-follower", "job.attempt"),
        ("benchfleet-follower", "job.claim"),
        ("benchfleet-follower", "server.start"),
        ("benchfleet-follower", "point"),
        ("benchfleet-follower", "point.upload"),
        ("benchfleet-follower", "job.finish"),
    }
    deadline = time.monotonic() + 30
    while not wanted <= {(s.service, s.name) for s in collector.of_trace(trace_id)}:
        assert time.monotonic() < deadline, sorted({(s.service, s.name) for s in collector.of_trace(trace_id)})
        time.sleep(0.1)
    spans = collector.of_trace(trace_id)
    by_name = {(s.service, s.name): s for s in spans}
    # The job's trace hangs from its submission (whose own parent is the HTTP request's span, where FastAPI records
    # one): the leader's placement and finish and the follower's attempt are its children.
    submit = by_name[("benchfleet-leader", "job.submit")]
    attempt = by_name[("benchfleet-follower", "job.attempt")]
    for key in (("benchfleet-leader", "job.place"), ("benchfleet-leader", "job.finish"), ("benchfleet-follower", "job.attempt")):
        assert by_name[key].parent_id == submit.span_id, key
    point = by_name[("benchfleet-follower", "point")]
    for name in ("job.claim", "server.start", "point", "job.finish"):
        assert by_name[("benchfleet-follower", name)].parent_id == attempt.span_id, name
    # The server under test was sent the point span's context with every request.
    seen = httpx.get(f"{server}/stats").json()["traceparents"]
    assert [t.rsplit("-", 1)[0] for t in seen] == [f"00-{trace_id}-{point.span_id}"]  # (then the trace flags)
    # The follower's log lines about the job carry its trace id.
    log_lines = [json.loads(line) for line in traced_fleet.followers[0].log_path.read_text().splitlines() if line.startswith("{")]
    about = [line for line in log_lines if line.get("job_id") == job.id]
    assert any("claimed" in line["message"] for line in about)
    assert {line.get("trace_id") for line in about} == {trace_id}, about
