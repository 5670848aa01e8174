"""Injected faults, each on its own processes (Redis, SecantusDB, leader, follower) since the tests restart them.

Every test ends with each job either succeeded with exactly one result per point of its final attempt (counted in
PerfDB), or failed with a stated reason and accepted again when resubmitted; and records its row in docs/faults.md.
"""

from __future__ import annotations

import os
import signal
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pymongo
import pytest

from benchfleet.generate.modelgen import mlp_onnx
from benchfleet.stack import LocalStack
from common.wire.jobs import TERMINAL_STATES, JobState, JobView
from tests.faults.outcomes import record
from tests.faults.proxy import CuttableProxy

pytestmark = pytest.mark.e2e

MODEL = "mlp-faults:1"
CUT_S = 30.0


def wait_until(predicate: Callable[[], Any], timeout_s: float, what: str, every_s: float = 0.1) -> Any:
    """Poll until predicate() is truthy and return it (a readiness wait, not a sleep)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            value = predicate()
        except Exception:  # noqa: BLE001 - a service being restarted answers with errors for a while
            value = None
        if value:
            return value
        time.sleep(every_s)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")


class FaultStack(LocalStack):
    """Its own durable Redis, SecantusDB, leader and one follower (ft) reaching the leader through a cuttable proxy."""

    def __init__(self, workdir: Path) -> None:
        self.db_name = f"faults_{uuid.uuid4().hex[:8]}"
        env = {
            # Longer than the 30 s cut: the cut-off follower keeps its job, so its buffered results must be the ones kept.
            "BENCHFLEET_LEADER_MISSING_AFTER_S": "60",
            "BENCHFLEET_FOLLOWER_HEARTBEAT_INTERVAL_S": "0.5",
            "BENCHFLEET_FOLLOWER_METRICS_PORT": "-1",
            "BENCHFLEET_FOLLOWER_AGEING_PER_S": "0",
        }
        super().__init__(workdir, db_name=self.db_name, base_env={"PATH": "/usr/bin:/bin"}, env=env)
        self.proxy = CuttableProxy(self.leader_port)

    def start_ft(self) -> None:
        """The follower, through the proxy, once the leader lists it ready."""
        self.start_follower("ft", env={"BENCHFLEET_FOLLOWER_LEADER_URL": self.proxy.url}, ready=lambda f: f.state == "ready")

    @property
    def follower_dir(self) -> Path:
        return self.workdir / "ft"

    def results_count(self, job_id: str, attempt: int) -> int:
        """Point results stored in PerfDB for one attempt, counted by a fresh client (the server may have restarted)."""
        assert self.mongo_uri is not None
        with pymongo.MongoClient(self.mongo_uri, serverSelectionTimeoutMS=10_000) as mongo:
            return mongo[self.db_name]["results"].count_documents({"job_id": job_id, "attempt": attempt})


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FaultStack]:
    stack = FaultStack(tmp_path_factory.mktemp("faults"))
    try:
        # Durable like a production broker: every write is in the append-only file before Redis answers.
        stack.start_redis(durable=True)
        stack.start_mongo()
        stack.start_leader()
        stack.proxy.start()
        stack.start_ft()
        with stack.client() as client:
            client.upload_model(mlp_onnx(), name="mlp-faults", version="1")
        yield stack
    finally:
        stack.close(grace_s=5)
        stack.proxy.stop()


def job_yaml(name: str, *, batches: tuple[int, ...] = (1, 2), seconds: float = 1.0, rate: int = 20) -> str:
    return f"""
name: {name}
model: {{ref: {MODEL}}}
backends: [onnxruntime]
batch_sizes: [{", ".join(str(b) for b in batches)}]
load: {{pattern: constant, rate: {rate}, duration: {seconds}s, warmup: 0s, allow_short: true}}
"""


def settle(stack: FaultStack, job_ids: list[str], timeout_s: float = 90) -> list[JobView]:
    """Wait until every job is terminal; assert exactly-one-result or a stated, resubmittable failure."""
    with stack.client() as client:
        wait_until(lambda: all(client.job(j).state in TERMINAL_STATES for j in job_ids), timeout_s, "all jobs to end")
        views = [client.job(j) for j in job_ids]
        for view in views:
            if view.state == JobState.succeeded:
                points = client.results(view.id).points
                assert sorted(p.point.index for p in points) == list(range(view.points_total)), view.id
                assert stack.results_count(view.id, view.attempt) == view.points_total, "exactly one result per point"
            else:
                assert view.state == JobState.failed and view.error, (view.id, view.state, view.error)
                again = client.submit(view.spec)  # a failed job can be submitted again as it was
                assert again.id != view.id and again.state in (JobState.queued, JobState.assigned)
    return views


def _servers_under(marker: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        cmdline = " ".join(proc.info["cmdline"] or [])
        if "follower.servers." in cmdline and marker in cmdline:
            found.append(proc)
    return found


def _established(proc: psutil.Process) -> bool:
    """Whether the process holds an established TCP connection, in whichever network namespace it lives (a sandboxed
    server has its own: psutil reads only this process's /proc/net)."""
    if os.readlink(f"/proc/{proc.pid}/ns/net") == os.readlink("/proc/self/ns/net"):
        return any(c.status == psutil.CONN_ESTABLISHED for c in proc.net_connections(kind="tcp"))
    sockets = {os.readlink(f"/proc/{proc.pid}/fd/{fd}") for fd in os.listdir(f"/proc/{proc.pid}/fd")}
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/{proc.pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "01" and f"socket:[{fields[9]}]" in sockets:  # 01: ESTABLISHED
                return True
    return False


def _serving(marker: str) -> psutil.Process | None:
    """The model server under the follower's dir once the load generator is connected to it."""
    for proc in _servers_under(marker):
        try:
            if _established(proc):
                return proc
        except (psutil.Error, OSError):
            continue
    return None


def test_model_server_crash_mid_point_is_reported_and_leaves_no_server(stack: FaultStack) -> None:
    marker = str(stack.follower_dir)
    log = stack.procs["ft"].log_path
    with stack.client() as client:
        job = client.submit_yaml(job_yaml("crash-server", batches=(1,), seconds=5.0, rate=50))
        # Ready and answered its first request (the follower logs it), then the generator connects: kill it under load.
        wait_until(lambda: any(job.id in line and "onnxruntime ready" in line for line in log.read_text().splitlines()),
                   60, "the model server to be ready")
        server = wait_until(lambda: _serving(marker), 30, "the load generator to connect")
        os.kill(server.pid, signal.SIGKILL)
    [view] = settle(stack, [job.id])
    with stack.client() as client:
        if view.state == JobState.succeeded:
            [point] = client.results(job.id).points
            # The crash must be visible in the result, never a clean-looking point.
            assert not point.valid and point.invalid_reasons, point
            assert point.errors > 0 or point.ok < point.requests, point
            failed = "failed requests counted as errors" if point.errors else "the unanswered requests counted"
            outcome = f"point reported invalid with its reasons, {failed}"
        else:
            outcome = f"job failed with the reason {view.error!r}, resubmittable"
    wait_until(lambda: not _servers_under(marker), 20, "no model server left")
    record("fault", "model server SIGKILLed mid-point (ORT server under a follower)",
           f"{outcome}; job {view.state.value}; no model server left running")


def test_follower_cut_off_for_30s_delivers_buffered_results_exactly_once(stack: FaultStack) -> None:
    outbox = stack.follower_dir / "outbox"
    with stack.client() as client:
        job = client.submit_yaml(job_yaml("cut-off"))
        wait_until(lambda: client.job(job.id).state == JobState.running, 60, "the job to run")
    stack.proxy.cut()
    cut_at = time.monotonic()
    try:
        # A point finishes while the leader is unreachable: its result must be on the follower's disk.
        buffered = wait_until(lambda: sorted(p.name for p in outbox.glob(f"{job.id}-*.json")), CUT_S - 2, "a buffered result")
        with stack.client() as client:
            assert client.job(job.id).points_done == 0, "nothing reached the leader during the cut"
        wait_until(lambda: time.monotonic() - cut_at >= CUT_S, CUT_S + 1, "the end of the cut", every_s=0.5)
        assert outbox.glob(f"{job.id}-*.json"), "the result stayed on disk for the whole cut"
    finally:
        stack.proxy.restore()
    [view] = settle(stack, [job.id])
    assert view.state == JobState.succeeded and view.attempt == 1, (view.state, view.error, view.history)
    posts = [r for r in stack.proxy.requests if r == f"POST /api/v1/jobs/{job.id}/points"]
    assert len(posts) == view.points_total, f"each point crossed the link exactly once: {posts}"
    assert not list(outbox.glob(f"{job.id}-*")), "the outbox is empty once the leader acknowledged"
    record("fault", f"follower cut off from the leader for {CUT_S:g} s (TCP proxy dropped) mid-job",
           f"{len(buffered)} point result(s) buffered on the follower's disk during the cut; each point sent exactly once "
           "after it; "
           "job succeeded on attempt 1 with one result per point")


def _mid_queue(stack: FaultStack, service: str, name: str) -> tuple[list[JobView], int | None, float]:
    """Submit three jobs, restart `service` while the first runs and the others wait, then settle them all; with how
    the old process ended (its exit status: negative for the signal that killed it) and how long its stop took."""
    with stack.client() as client:
        ids = [client.submit_yaml(job_yaml(f"{name}-{i}", batches=(1,))).id for i in range(3)]
        wait_until(lambda: client.job(ids[0]).state == JobState.running, 60, "the first job to run")
    asked = time.monotonic()
    code = stack.procs[service].stop(grace_s=10)  # SIGTERM, SIGKILL only after 10 s
    took = time.monotonic() - asked
    stack.restart(service)
    return settle(stack, ids, timeout_s=120), code, took


def test_leader_restart_mid_queue(stack: FaultStack) -> None:
    views, code, took = _mid_queue(stack, "leader", "leader-restart")
    # It ended by itself, in time: uvicorn shuts the app down, then ends on the signal it was sent (status -15); never
    # the SIGKILL that follows a stop's 10 s grace.
    assert code in (0, -signal.SIGTERM) and took < 5.0, f"the leader ended with {code} after {took:.1f} s of SIGTERM"
    assert all(v.state == JobState.succeeded for v in views), [(v.state, v.error) for v in views]
    record("fault", "leader restarted (SIGTERM) while one job runs and two wait",
           f"all {len(views)} jobs succeeded, one result per point (attempts {[v.attempt for v in views]})")


def test_redis_restart_mid_queue(stack: FaultStack) -> None:
    views, _, _ = _mid_queue(stack, "redis", "redis-restart")
    assert all(v.state == JobState.succeeded for v in views), [(v.state, v.error) for v in views]
    record("fault", "Redis (broker, append-only file) restarted while one job runs and two wait",
           f"all {len(views)} jobs succeeded, one result per point (attempts {[v.attempt for v in views]})")


def test_secantus_restart_mid_queue(stack: FaultStack) -> None:
    views, _, _ = _mid_queue(stack, "mongo", "mongo-restart")
    states = {v.state for v in views}
    assert states <= {JobState.succeeded, JobState.failed}
    outcome = ", ".join(f"{v.state.value}" + (f" ({v.error[:80]}; resubmitted)" if v.error else "") for v in views)
    record("fault", "SecantusDB (PerfDB, on-disk storage) restarted while one job runs and two wait",
           f"{outcome}; one result per point of each succeeded job")


def test_secantus_sigkill_right_after_acknowledged_submissions_loses_none(stack: FaultStack) -> None:
    """The embedded database SIGKILLed the moment the leader acknowledged the last of 8 submissions: all 8 are there
    after its restart (the leader writes with journal=True; before, SIGKILL lost every acknowledged insert)."""
    with stack.client() as client:
        ids = [client.submit_yaml(job_yaml(f"db-kill-{i}", batches=(1,), seconds=0.5)).id for i in range(8)]
    mongo = stack.procs["mongo"]
    assert mongo.pid is not None
    os.killpg(mongo.pid, signal.SIGKILL)
    mongo.stop(grace_s=0)
    stack.start_mongo()
    with pymongo.MongoClient(stack.mongo_uri, serverSelectionTimeoutMS=10_000) as fresh:
        kept = {doc["_id"] for doc in fresh[stack.db_name]["jobs"].find({"_id": {"$in": ids}}, {"_id": 1})}
    assert kept == set(ids), f"lost {len(set(ids) - kept)} acknowledged submissions"
    views = settle(stack, ids, timeout_s=180)
    outcome = ", ".join(sorted({v.state.value for v in views}))
    record("fault", "SecantusDB SIGKILLed right after the leader acknowledged 8 submissions",
           f"all 8 submissions were there after its restart; the jobs ended {outcome}, one result per point")


def test_no_token_or_credential_in_any_fault_log(stack: FaultStack) -> None:
    secrets_ = [stack.admin_token, stack.follower_token]
    with pymongo.MongoClient(stack.mongo_uri) as mongo:  # stored token hashes must not leak either
        secrets_ += [d.get("hash") for d in mongo[stack.db_name]["tokens"].find({}) if d.get("hash")]
    logs = [p for p in stack.workdir.rglob("*.log") if p.is_file()]
    assert len(logs) >= 5, logs
    for path in logs:
        text = path.read_text(errors="replace")
        assert "Bearer " not in text, path
        # One line per HTTP request (httpx at INFO) was three quarters of a follower's log: heartbeats say nothing.
        assert '"logger": "httpx"' not in text and " httpx: " not in text, path
        for secret in secrets_:
            assert secret not in text, f"a credential appears in {path}"
