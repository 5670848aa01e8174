"""One error hierarchy; each class carries the HTTP status the leader renders it with."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError


class BenchfleetError(Exception):
    """Base of every error benchfleet raises on purpose."""

    status: int = 500
    code: str = "internal"

    def __init_subclass__(cls, *, status: int | None = None, code: str | None = None, **kwargs: Any) -> None:
        """`class NotFound(BenchfleetError, status=404, code="not_found")`: each error names its HTTP status and code."""
        super().__init_subclass__(**kwargs)
        if status is not None:
            cls.status = status
        if code is not None:
            cls.code = code

    def __init__(self, message: str, *, field: str | None = None, details: Any = None, retry_after_s: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field
        self.details = details
        self.retry_after_s = retry_after_s  # sent as Retry-After: when trying again may succeed

    def to_dict(self) -> dict[str, Any]:
        """Render as the API's error body: {"error", "message", "field", "details"}."""
        body: dict[str, Any] = {"error": self.code, "message": self.message, "field": self.field}
        if self.details is not None:
            body["details"] = self.details
        return body


class InvalidSpec(BenchfleetError, status=422, code="invalid_spec"):
    """A job spec, model or data set that fails validation; `field` names what is wrong."""


class InvalidRequest(BenchfleetError, status=400, code="invalid_request"):
    """A request the API cannot act on as sent (a bad parameter, a page argument)."""


class Unauthorized(BenchfleetError, status=401, code="unauthorized"):
    """No token, or one that is unknown or revoked."""


class Forbidden(BenchfleetError, status=403, code="forbidden"):
    """A known token whose role may not do this."""


class NotFound(BenchfleetError, status=404, code="not_found"):
    """The job, model, data set, follower or baseline named does not exist."""


class Conflict(BenchfleetError, status=409, code="conflict"):
    """The resource exists already, or its state forbids the change (e.g. a stale attempt)."""


class Incompatible(BenchfleetError, status=409, code="incompatible"):
    """A follower whose leader/follower contract this leader does not speak (common/wire/compat.py); the message says
    which side to upgrade."""


class PayloadTooLarge(BenchfleetError, status=413, code="payload_too_large"):
    """A body or upload over this leader's limits."""


class UnsupportedMediaType(BenchfleetError, status=415, code="unsupported_media_type"):
    """A body in a Content-Type the endpoint does not take."""


class TooManyRequests(BenchfleetError, status=429, code="too_many_requests"):
    """Over a per-user limit (waiting jobs); retry later."""


class Unavailable(BenchfleetError, status=503, code="unavailable"):
    """A dependency (database, broker) cannot be reached now; retry later."""


_MESSAGES = {
    "greater_than": "must be > {gt}",
    "greater_than_equal": "must be >= {ge}",
    "less_than": "must be < {lt}",
    "less_than_equal": "must be <= {le}",
    "extra_forbidden": "unknown field",
    "missing": "field required",
}


def field_errors(exc: ValidationError) -> list[dict[str, str]]:
    """Pydantic errors as [{"field": "load.rate", "message": ...}] with dotted paths."""
    out = []
    for err in exc.errors(include_url=False):
        loc = [str(p) for p in err["loc"] if not (isinstance(p, str) and p.startswith(("function-", "constrained-")))]
        # Drop pydantic's union-branch labels (e.g. "float", "list[...]") so the path names the field.
        loc = [p for p in loc if not (p in {"float", "int", "str"} or p.startswith(("list[", "tagged-union")))]
        message = _MESSAGES[err["type"]].format(**err.get("ctx", {})) if err["type"] in _MESSAGES else err["msg"]
        message = message.removeprefix("Value error, ")
        out.append({"field": ".".join(loc) or "(root)", "message": message})
    return out
