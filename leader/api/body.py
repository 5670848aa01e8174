"""Request bodies read with a hard size limit: Content-Length is checked first, and bytes are counted as they arrive."""

from __future__ import annotations

from fastapi import Request
from starlette.types import Message, Receive

from common.errors import InvalidRequest, InvalidSpec, PayloadTooLarge
from common.wire.records import missing_columns


def _check_declared(request: Request, limit: int) -> None:
    declared = request.headers.get("content-length")
    if declared is None:
        return
    try:
        size = int(declared)
    except ValueError:
        raise InvalidRequest("Content-Length is not a number", field="(body)") from None
    if size > limit:
        raise PayloadTooLarge(f"body of {size} bytes exceeds the limit of {limit} bytes", field="(body)")


async def read_limited(request: Request, limit: int) -> bytes:
    """The whole body, refusing (413) more than `limit` bytes whatever Content-Length claims."""
    _check_declared(request, limit)
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise PayloadTooLarge(f"body exceeds the limit of {limit} bytes", field="(body)")
        chunks.append(chunk)
    return b"".join(chunks)


def limited_request(request: Request, limit: int) -> Request:
    """A view of the request whose body stream raises PayloadTooLarge past `limit` bytes (for form parsing)."""
    _check_declared(request, limit)
    receive = request.receive
    size = 0

    async def counting_receive() -> Message:
        nonlocal size
        message = await receive()
        if message["type"] == "http.request":
            size += len(message.get("body", b""))
            if size > limit:
                raise PayloadTooLarge(f"body exceeds the limit of {limit} bytes", field="(body)")
        return message

    wrapped: Receive = counting_receive
    return Request(request.scope, receive=wrapped)


def check_records_blob(data: bytes) -> None:
    """Refuse anything but a raw-records blob (common.wire.records) holding the required arrays; nothing is unpickled."""
    try:
        missing = missing_columns(data)
    except ValueError as exc:
        raise InvalidSpec(str(exc), field="(body)") from None
    if missing:
        raise InvalidSpec(f"records lack the arrays {', '.join(missing)}", field="(body)")
