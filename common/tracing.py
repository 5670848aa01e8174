"""Traces of a job's way: OpenTelemetry spans for submit, place, claim, fetch, convert, cold start, each point, upload
and finish, across leader and follower, in one trace per job.

A job's trace is named by a W3C `traceparent` made at submission (the `job.submit` span's, or a fresh one where no
exporter is configured) and stored on the job; it travels in the task to the follower, so every later span, in either
process, is a child of it, and every log line about the job carries its trace id (common/logs.py). Spans are exported
over OTLP/HTTP only when configured by OpenTelemetry's own variables (OTEL_EXPORTER_OTLP_ENDPOINT or
OTEL_EXPORTER_OTLP_TRACES_ENDPOINT; OTEL_SERVICE_NAME); otherwise tracing is off and costs a context variable.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import secrets
from collections.abc import Iterator, Mapping
from contextvars import ContextVar

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import NonRecordingSpan, Span, SpanContext, TraceFlags

from common.logs import TRACE_ID

log = logging.getLogger(__name__)

ENDPOINT_SETTINGS = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
TRACEPARENT = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$")
Attributes = Mapping[str, str | int | float | bool]
_ON: list[bool] = [False]


def configured() -> bool:
    """Whether spans are to be exported (an OTLP endpoint is set)."""
    return any(os.environ.get(name) for name in ENDPOINT_SETTINGS)


def setup(service: str) -> bool:
    """Export this process's spans over OTLP/HTTP as `service` (OTEL_SERVICE_NAME wins) when configured; whether on."""
    if not configured() or _ON[0]:
        return _ON[0]
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    provider = TracerProvider(resource=Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME") or service}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    _ON[0] = True
    log.info("traces exported over OTLP as %s", os.environ.get("OTEL_SERVICE_NAME") or service)
    return True


def flush(timeout_ms: int = 5000) -> None:
    """Send what is buffered (a process about to exit, an attempt just finished)."""
    provider = trace.get_tracer_provider()
    force_flush = getattr(provider, "force_flush", None)  # the SDK's provider has it; the API's no-op one does not
    if force_flush is not None:
        force_flush(timeout_ms)


def _context(traceparent: str | None) -> Context | None:
    """The remote parent a traceparent names (None: none, or not a valid one)."""
    match = TRACEPARENT.match(traceparent or "")
    if match is None:
        return None
    trace_id, span_id, flags = (int(g, 16) for g in match.groups())
    if not trace_id or not span_id:
        return None
    parent = SpanContext(trace_id, span_id, is_remote=True, trace_flags=TraceFlags(flags))
    return trace.set_span_in_context(NonRecordingSpan(parent))


def traceparent_of(span: Span) -> str | None:
    """The W3C traceparent naming `span` (None for a span that is not real: tracing off)."""
    ctx = span.get_span_context()
    if not ctx.is_valid:
        return None
    return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}"


def trace_id_of(traceparent: str | None) -> str | None:
    """The trace id a valid traceparent carries (None for a malformed one, or one of all-zero ids: W3C's invalid)."""
    match = TRACEPARENT.match(traceparent or "")
    if match is None or not int(match.group(1), 16) or not int(match.group(2), 16):
        return None
    return match.group(1)


def fresh_traceparent() -> str:
    """A new trace's traceparent (a job's, where no span was recorded: its logs still share one id)."""
    return f"00-{secrets.token_hex(16)}-{secrets.token_hex(8)}-01"


# The traceparent in effect: the innermost span's (or, tracing off, the job's), for a child in another process.
CURRENT: ContextVar[str | None] = ContextVar("benchfleet_traceparent", default=None)


@contextlib.contextmanager
def span(name: str, *, parent: str | None = None, attributes: Attributes | None = None) -> Iterator[str | None]:
    """A span named `name`, child of `parent` (a traceparent) or else of the span in effect; yields the traceparent a
    child elsewhere takes (the span's own; with tracing off, the job's, so the trace id still holds). Log lines inside
    carry the trace id. An exception inside is recorded on the span and re-raised."""
    tracer = trace.get_tracer("benchfleet")
    with tracer.start_as_current_span(name, context=_context(parent), attributes=dict(attributes or {})) as current:
        effective = traceparent_of(current) or (parent if trace_id_of(parent) else None) or CURRENT.get()
        token, trace_token = CURRENT.set(effective), TRACE_ID.set(trace_id_of(effective))
        try:
            yield effective
        finally:
            TRACE_ID.reset(trace_token)
            CURRENT.reset(token)


def annotate(attributes: Attributes) -> None:
    """Add attributes to the span in effect (a job's id, known once it is stored)."""
    trace.get_current_span().set_attributes(dict(attributes))


def propagation_header(traceparent: str | None) -> tuple[str, str] | None:
    """The `traceparent` header a request to the server under test carries, so its own spans join the job's trace
    (None without a valid one)."""
    return ("traceparent", traceparent) if traceparent and trace_id_of(traceparent) else None
