"""Structured logs for the leader and follower processes: one JSON object per line, with job and follower ids."""

from __future__ import annotations

import json
import logging
import os
import sys
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any

# Set where a job or follower is being worked on; every log record made in that context carries them.
JOB_ID: ContextVar[str | None] = ContextVar("benchfleet_job_id", default=None)
TRACE_ID: ContextVar[str | None] = ContextVar("benchfleet_trace_id", default=None)  # the job's trace (common/tracing.py)
FOLLOWER_ID: ContextVar[str | None] = ContextVar("benchfleet_follower_id", default=None)

# A process-wide default (a follower agent has one id for all its threads; threads do not inherit contextvars).
_PROCESS_FOLLOWER_ID: list[str | None] = [None]

LOG_FORMAT_ENV = "BENCHFLEET_LOG_FORMAT"
LOG_LEVEL_ENV = "BENCHFLEET_LOG_LEVEL"
LOG_FORMATS = ("json", "text")
_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime", "taskName"}


def set_process_follower_id(follower_id: str | None) -> None:
    """Tag every log record of this process with a follower id (unless a context sets another)."""
    _PROCESS_FOLLOWER_ID[0] = follower_id


def _follower_id(record: logging.LogRecord) -> str | None:
    return getattr(record, "follower_id", None) or FOLLOWER_ID.get() or _PROCESS_FOLLOWER_ID[0]


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time, level, logger, process, message, job_id, follower_id, trace_id and any `extra`
    fields."""

    def __init__(self, process: str) -> None:
        super().__init__()
        self.process = process

    def format(self, record: logging.LogRecord) -> str:
        """Render one record as a JSON line."""
        out: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, tz=UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "process": self.process,
            "logger": record.name,
            "message": record.getMessage(),
        }
        job_id = getattr(record, "job_id", None) or JOB_ID.get()
        follower_id = _follower_id(record)
        if job_id:
            out["job_id"] = job_id
        if follower_id:
            out["follower_id"] = follower_id
        if trace_id := TRACE_ID.get():
            out["trace_id"] = trace_id
        for key, value in vars(record).items():
            if key not in _STANDARD and key not in out and not key.startswith("_"):
                out[key] = value if isinstance(value, str | int | float | bool | type(None)) else repr(value)
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out, ensure_ascii=False)


class _ContextText(logging.Formatter):
    """The plain-text format, with the ids appended when known."""

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        ids = [
            f"{k}={v}"
            for k, v in (
                ("job", getattr(record, "job_id", None) or JOB_ID.get()),
                ("follower", _follower_id(record)),
                ("trace", TRACE_ID.get()),
            )
            if v
        ]
        return f"{line} [{' '.join(ids)}]" if ids else line


def setup_logging(process: str, *, log_format: str | None = None, level: str | None = None) -> str:
    """Configure the root logger for one process (json by default, or BENCHFLEET_LOG_FORMAT=text); returns the format."""
    fmt = (log_format or os.environ.get(LOG_FORMAT_ENV) or "json").lower()
    if fmt not in LOG_FORMATS:
        raise ValueError(f"{LOG_FORMAT_ENV} must be one of {', '.join(LOG_FORMATS)}, got {fmt!r}")
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter(process))
    else:
        handler.setFormatter(_ContextText("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel((level or os.environ.get(LOG_LEVEL_ENV) or "INFO").upper())
    # uvicorn's access log would repeat every request; the API latency metric covers it.
    logging.getLogger("uvicorn.access").setLevel(logging.WARNING)
    # httpx logs every request at INFO: a follower's heartbeats were three quarters of its log.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    return fmt
