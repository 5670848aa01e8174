"""The job's trace with no exporter configured: a fresh traceparent at submission, spans that hand on their parent's
context (so every process's log lines carry the job's trace id), and the header a request to the server carries."""

from __future__ import annotations

import logging

from common import tracing
from common.logs import TRACE_ID, JsonFormatter


def test_without_an_exporter_a_span_hands_on_the_jobs_trace_and_logs_carry_it() -> None:
    assert not tracing.configured()
    job = tracing.fresh_traceparent()
    assert tracing.TRACEPARENT.match(job) and tracing.fresh_traceparent() != job
    trace_id = tracing.trace_id_of(job)
    assert trace_id is not None and job == f"00-{trace_id}-{job.split('-')[2]}-01"
    record = logging.LogRecord("t", logging.INFO, __file__, 1, "inside", None, None)
    with tracing.span("job.attempt", parent=job) as outer:
        assert outer == job  # nothing recorded: the job's own context goes on
        with tracing.span("point") as inner:
            assert inner == job and TRACE_ID.get() == trace_id
            assert f'"trace_id": "{trace_id}"' in JsonFormatter("test").format(record)
            assert tracing.propagation_header(inner) == ("traceparent", job)
    assert TRACE_ID.get() is None and tracing.CURRENT.get() is None
    assert '"trace_id"' not in JsonFormatter("test").format(record)


def test_only_a_valid_traceparent_is_a_parent_or_a_header() -> None:
    zeros = f"00-{'0' * 32}-{'1' * 16}-01"  # well formed, but W3C's invalid trace id
    for bad in (None, "", "00-abc-def-01", zeros, f"00-{'a' * 32}-{'0' * 16}-01", "junk" + tracing.fresh_traceparent()):
        assert tracing.trace_id_of(bad) is None and tracing.propagation_header(bad) is None
        with tracing.span("x", parent=bad) as effective:
            assert effective is None and TRACE_ID.get() is None  # never handed on, never a trace id
