"""The leader's gRPC telemetry server: followers report live measurement windows (protos/telemetry.proto).

Runs on the app's event loop (grpc.aio) inside the lifespan. Each call is authenticated with the follower's own
credential from the `authorization` metadata and must belong to the attempt that follower is running; the windows
go to PerfDB (leader.store.progress), bounded per point.
"""

from __future__ import annotations

import logging
from typing import Any

import grpc
from pydantic import ValidationError

from common.errors import Conflict, NotFound
from common.wire.results import WindowStat
from leader.api.deps import Resources, authenticate
from leader.store import jobs as jobs_store
from leader.store import progress as progress_store
from protos import telemetry_pb2, telemetry_pb2_grpc

log = logging.getLogger(__name__)

MAX_MESSAGE_BYTES = 1024 * 1024
MAX_WINDOWS_PER_REPORT = 1000
MAX_POINT_INDEX = 100_000
_OPTIONAL = ("p50_ms", "p99_ms", "send_lag_p99_ms")


def _bearer(context: grpc.aio.ServicerContext) -> str | None:
    for key, value in context.invocation_metadata() or ():
        if key == "authorization" and isinstance(value, str) and value.startswith("Bearer "):
            return value[len("Bearer ") :]
    return None


def windows_from_proto(windows: Any) -> list[WindowStat]:
    """WindowStat models from protobuf windows (unset optionals → None); pydantic checks every value."""
    out = []
    for w in windows:
        fields = {name: getattr(w, name) for name in ("t_s", "duration_s", "requests", "ok", "throughput")}
        fields.update({name: getattr(w, name) if w.HasField(name) else None for name in _OPTIONAL})
        out.append(WindowStat.model_validate(fields))
    return out


class TelemetryServicer(telemetry_pb2_grpc.TelemetryServicer):
    """Report: store the latest windows of one point of a running attempt."""

    def __init__(self, resources: Resources) -> None:
        self.resources = resources

    async def Report(  # noqa: N802 - the name is the RPC's
        self, request: telemetry_pb2.ProgressReport, context: grpc.aio.ServicerContext
    ) -> telemetry_pb2.ReportReply:
        """Authenticate, check the attempt is this follower's running one, store the windows."""
        token = _bearer(context)
        principal = await authenticate(self.resources, token) if token else None
        if principal is None or principal.role not in ("follower", "admin"):
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or wrong follower credential (authorization)")
        assert principal is not None
        if not principal.may_act_as_follower(request.follower_id):
            denied = f"the credential does not belong to follower_id {request.follower_id!r}"
            await context.abort(grpc.StatusCode.PERMISSION_DENIED, denied)
        if not 0 <= request.point_index <= MAX_POINT_INDEX:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"point_index must be within 0..{MAX_POINT_INDEX}")
        if len(request.windows) > MAX_WINDOWS_PER_REPORT:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"windows: at most {MAX_WINDOWS_PER_REPORT} per report")
        try:
            windows = windows_from_proto(request.windows)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first.get("loc", ()))
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"windows.{where}: {first.get('msg')}")
        db = self.resources.db
        try:
            await jobs_store.running_attempt(db, job_id=request.job_id, attempt=request.attempt, follower_id=request.follower_id)
        except NotFound as exc:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"job_id: {exc}")
        except Conflict as exc:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, f"attempt: {exc}")
        await progress_store.save_windows(
            db,
            job_id=request.job_id,
            attempt=request.attempt,
            follower_id=request.follower_id,
            index=request.point_index,
            windows=[w.model_dump() for w in windows],
            dropped=request.dropped,
        )
        return telemetry_pb2.ReportReply(accepted=True)


async def start_server(
    resources: Resources, host: str, port: int, tls: tuple[bytes, bytes] | None = None
) -> tuple[grpc.aio.Server, int] | None:
    """Serve Telemetry on host:port, over TLS with `tls` (certificate chain, private key: PEM); None (live progress
    off, the leader still serves) when the port cannot be bound."""
    server = grpc.aio.server(
        options=[
            # gRPC sets SO_REUSEPORT by default: a second leader on the same port would silently share its calls.
            ("grpc.so_reuseport", 0),
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
        ]
    )
    telemetry_pb2_grpc.add_TelemetryServicer_to_server(TelemetryServicer(resources), server)
    try:
        if tls is not None:
            chain, key = tls
            bound = server.add_secure_port(f"{host}:{port}", grpc.ssl_server_credentials([(key, chain)]))
        else:
            bound = server.add_insecure_port(f"{host}:{port}")
    except RuntimeError as exc:
        log.warning("telemetry gRPC server not started on %s:%d: %s", host, port, exc)
        return None
    if not bound:
        log.warning("telemetry gRPC server not started: %s:%d could not be bound", host, port)
        return None
    await server.start()
    log.info("telemetry gRPC on %s:%d", host, bound)
    return server, bound
