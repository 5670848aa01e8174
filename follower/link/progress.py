"""Live progress to the leader over gRPC: a reporter that never blocks or fails the measurement.

The window monitor calls `sink` on the generator's thread; it only puts the latest windows into a small queue
(dropping the oldest report, counted, when the leader is slow). A daemon thread sends them with a short deadline;
a failed send is counted and forgotten: the point's result and raw records still go up over REST.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import grpc

from common.wire.results import WindowStat
from protos import telemetry_pb2, telemetry_pb2_grpc

log = logging.getLogger(__name__)

# Each report carries the point's windows so far; the leader keeps a tail anyway, so send only the newest.
MAX_WINDOWS_SENT = 60
QUEUE_SIZE = 8
SEND_TIMEOUT_S = 2.0
CLOSE_TIMEOUT_S = 3.0
_STOP = object()


def resolve_address(advertised: str | None, leader_url: str) -> str | None:
    """host:port to dial: the advertised address, its empty host filled from the leader URL; None when off."""
    if not advertised:
        return None
    host, _, port = advertised.rpartition(":")
    if not host:
        host = urlsplit(leader_url).hostname or "127.0.0.1"
    return f"{host}:{port}"


def window_to_proto(w: WindowStat) -> telemetry_pb2.Window:
    """A WindowStat as its protobuf message (None optionals left unset)."""
    fields: dict[str, Any] = {
        "t_s": w.t_s,
        "duration_s": w.duration_s,
        "requests": w.requests,
        "ok": w.ok,
        "throughput": w.throughput,
    }
    for name in ("p50_ms", "p99_ms", "send_lag_p99_ms"):
        value = getattr(w, name)
        if value is not None:
            fields[name] = value
    return telemetry_pb2.Window(**fields)


class ProgressReporter:
    """Sends one attempt's windows to the leader's Telemetry service from its own thread."""

    def __init__(
        self,
        address: str,
        credential: Callable[[], str | None],
        *,
        job_id: str,
        attempt: int,
        follower_id: str,
        tls: bool = False,
        ca_file: Path | None = None,
    ) -> None:
        self.address = address
        self.credential = credential
        self.job_id, self.attempt, self.follower_id = job_id, attempt, follower_id
        self.sent = 0
        self.dropped = 0
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=QUEUE_SIZE)
        options = [("grpc.enable_retries", 0)]
        if tls:  # the bearer credential travels in each call's metadata: never in the clear to a TLS leader
            roots = ca_file.read_bytes() if ca_file is not None else None
            self._channel = grpc.secure_channel(address, grpc.ssl_channel_credentials(root_certificates=roots), options=options)
        else:
            self._channel = grpc.insecure_channel(address, options=options)
        self._stub = telemetry_pb2_grpc.TelemetryStub(self._channel)
        self._thread = threading.Thread(target=self._run, name="progress-reporter", daemon=True)
        self._thread.start()

    def sink(self, point: Any, windows: list[WindowStat]) -> None:
        """runner.ProgressSink: queue the point's newest windows; never waits (drops the oldest queued instead)."""
        item = (int(point.index), list(windows[-MAX_WINDOWS_SENT:]))
        while True:
            try:
                self._queue.put_nowait(item)
                return
            except queue.Full:
                try:
                    self._queue.get_nowait()
                    self.dropped += 1
                except queue.Empty:
                    pass

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is _STOP:
                return
            index, windows = item
            try:
                request = telemetry_pb2.ProgressReport(
                    job_id=self.job_id,
                    attempt=self.attempt,
                    follower_id=self.follower_id,
                    point_index=index,
                    windows=[window_to_proto(w) for w in windows],
                    dropped=self.dropped,
                )
                token = self.credential() or ""
                self._stub.Report(request, timeout=SEND_TIMEOUT_S, metadata=[("authorization", f"Bearer {token}")])
                self.sent += 1
            except Exception as exc:  # progress is best effort: count it, never raise into the run
                self.dropped += 1
                if self.dropped == 1:
                    code = exc.code() if isinstance(exc, grpc.RpcError) else type(exc).__name__
                    log.warning("live progress to %s not delivered (%s); later failures only counted", self.address, code)

    def close(self) -> None:
        """Deliver what is queued (bounded wait), then close the channel."""
        with contextlib.suppress(queue.Full):
            self._queue.put(_STOP, timeout=CLOSE_TIMEOUT_S)
        self._thread.join(timeout=CLOSE_TIMEOUT_S)
        self._channel.close()
        log.info(
            "job %s attempt %d: live progress %d reports sent, %d dropped", self.job_id, self.attempt, self.sent, self.dropped
        )
