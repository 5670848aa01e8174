"""One error hierarchy; each class carries the HTTP status the leader renders it with."""

from __future__ import annotations

from typing import Any


class BenchfleetError(Exception):
    """Base of every error benchfleet raises on purpose."""

    status: int = 500
    code: str = "internal"

    def __init__(self, message: str, *, field: str | None = None, details: Any = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field
        self.details = details

    def to_dict(self) -> dict[str, Any]:
        """Render as the API's error body: {"error", "message", "field", "details"}."""
        body: dict[str, Any] = {"error": self.code, "message": self.message, "field": self.field}
        if self.details is not None:
            body["details"] = self.details
        return body


class InvalidSpec(BenchfleetError):
    status = 422
    code = "invalid_spec"


class InvalidRequest(BenchfleetError):
    status = 400
    code = "invalid_request"


class Unauthorized(BenchfleetError):
    status = 401
    code = "unauthorized"


class Forbidden(BenchfleetError):
    status = 403
    code = "forbidden"


class NotFound(BenchfleetError):
    status = 404
    code = "not_found"


class Conflict(BenchfleetError):
    status = 409
    code = "conflict"


class PayloadTooLarge(BenchfleetError):
    status = 413
    code = "payload_too_large"


class UnsupportedMediaType(BenchfleetError):
    status = 415
    code = "unsupported_media_type"


class TooManyRequests(BenchfleetError):
    status = 429
    code = "too_many_requests"


class Unavailable(BenchfleetError):
    status = 503
    code = "unavailable"
