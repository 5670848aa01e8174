"""One error shape for every failure: {"error", "message", "field", "details"?} with the class's HTTP status."""

from __future__ import annotations

import logging
from typing import Any

from bson.errors import InvalidDocument
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from common.errors import BenchfleetError

log = logging.getLogger(__name__)

_HTTP_CODES = {400: "invalid_request", 401: "unauthorized", 403: "forbidden", 404: "not_found", 405: "method_not_allowed"}


def _body(code: str, message: str, field: str | None, details: Any = None) -> dict[str, Any]:
    body: dict[str, Any] = {"error": code, "message": message, "field": field}
    if details is not None:
        body["details"] = details
    return body


def _dotted(loc: tuple[Any, ...] | list[Any]) -> str:
    return ".".join(str(part) for part in loc) or "(root)"


def validation_details(exc: RequestValidationError) -> list[dict[str, str]]:
    """FastAPI's validation errors as [{"field": "body.attempt", "message": ...}]; undecodable JSON is `(body)`."""
    out = []
    for err in exc.errors():
        if err.get("type") == "json_invalid":
            out.append({"field": "(body)", "message": f"malformed JSON: {err.get('ctx', {}).get('error', err.get('msg'))}"})
        else:
            out.append({"field": _dotted(err.get("loc", ())), "message": str(err.get("msg", "invalid"))})
    return out or [{"field": "(body)", "message": "invalid request"}]


async def _benchfleet_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, BenchfleetError)
    headers = _auth_header(exc.status) or {}
    if exc.retry_after_s is not None:
        headers["Retry-After"] = str(exc.retry_after_s)
    return JSONResponse(exc.to_dict(), status_code=exc.status, headers=headers or None)


async def _validation_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    details = validation_details(exc)
    first = details[0]
    return JSONResponse(
        _body("invalid_request", f"{first['field']}: {first['message']}", first["field"], details), status_code=422
    )


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    code = _HTTP_CODES.get(exc.status_code, "http_error")
    return JSONResponse(_body(code, str(exc.detail), None), status_code=exc.status_code, headers=exc.headers)


async def _overflow(request: Request, exc: Exception) -> JSONResponse:
    # A number in the request too large for PerfDB's 64-bit integers: the client's fault, not ours.
    return JSONResponse(_body("invalid_request", "a number in the request is too large to store", "(body)"), status_code=422)


async def _unstorable(request: Request, exc: Exception) -> JSONResponse:
    # Text PerfDB cannot hold: a key with a NUL byte (or another BSON-invalid key), or a lone UTF-16 surrogate that
    # JSON's \\u escapes let through validation. Only a request's own data reaches the database unchecked this way.
    log.warning("refused unstorable input on %s %s: %s", request.method, request.url.path, type(exc).__name__)
    why = (
        "a key in the request is not storable (NUL byte)"
        if isinstance(exc, InvalidDocument)
        else "the request has text that is not valid Unicode (a lone surrogate)"
    )
    return JSONResponse(_body("invalid_request", why, "(body)"), status_code=422)


async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
    # The traceback goes to the log, never to the client.
    log.exception("unhandled error on %s %s", request.method, request.url.path)
    return JSONResponse(_body("internal", "internal error", None), status_code=500)


def _auth_header(status: int) -> dict[str, str] | None:
    return {"WWW-Authenticate": "Bearer"} if status == 401 else None


# The statuses an operation may answer with the error body, documented in the OpenAPI (every operation under the API
# prefix): any may be refused (401, 403), fail validation (400, 422), not find what it names (404) or find the
# database down (503) or be one read too many at once (429, with Retry-After); one that changes something may
# conflict (409), be too large (413), of a type not taken (415), or over a cap (429: waiting jobs, uploads).
_WHY = {
    400: "Bad request",
    401: "No or unknown bearer token",
    403: "The token's role may not do this",
    404: "Not found",
    409: "Conflict with the current state",
    413: "Too large",
    415: "Unsupported media type",
    422: "Invalid input (the field is named)",
    429: "Too many at once: waiting jobs, uploads or reads (see Retry-After)",
    503: "The database is unreachable (see Retry-After)",
}
_ERROR_SCHEMA = {
    "type": "object",
    "required": ["error", "message", "field"],
    "properties": {
        "error": {"type": "string"},
        "message": {"type": "string"},
        "field": {"type": ["string", "null"]},
        "details": {},
    },
}


def _statuses(method: str) -> list[int]:
    statuses = [400, 401, 403, 404, 422, 429, 503]  # 404: a resource named in the path, the query or the body
    if method in ("post", "put", "patch", "delete"):
        statuses += [409, 413, 415]
    return statuses


def document(app: FastAPI, prefix: str) -> None:
    """Add the error body and each operation's error statuses to the app's OpenAPI document."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        schema = build()
        schema.setdefault("components", {}).setdefault("schemas", {})["Error"] = _ERROR_SCHEMA
        ref = {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
        for path, operations in schema.get("paths", {}).items():
            if not path.startswith(prefix):
                continue
            for method, operation in operations.items():
                responses = operation.setdefault("responses", {})
                for status in _statuses(method):
                    responses[str(status)] = {"description": _WHY[status], "content": ref}
        app.openapi_schema = schema
        return schema

    app.openapi = openapi  # type: ignore[method-assign]


def install(app: FastAPI) -> None:
    """Register the handlers on the app."""
    app.add_exception_handler(BenchfleetError, _benchfleet_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(OverflowError, _overflow)
    app.add_exception_handler(InvalidDocument, _unstorable)
    app.add_exception_handler(UnicodeEncodeError, _unstorable)
    app.add_exception_handler(Exception, _unexpected)
