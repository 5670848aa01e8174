"""What every multipart upload route shares: its OpenAPI body, the form read under the size limit, the text fields'
checks, and the spooled file streamed back out for GridFS."""

from __future__ import annotations

import contextlib
import re
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from typing import Any, BinaryIO

import anyio.to_thread
from fastapi import Request
from starlette.datastructures import FormData, UploadFile

from common.errors import InvalidSpec, TooManyRequests, UnsupportedMediaType
from leader.api.body import limited_request

# Room for the multipart boundaries and the small text fields around the file itself.
FORM_OVERHEAD_BYTES = 64 * 1024
# GridFS's default chunk size: each read of the spooled upload becomes one chunk document.
CHUNK_BYTES = 255 * 1024
UPLOAD_RETRY_S = 5  # Retry-After of an upload refused for want of a slot


def multipart_body(required: list[str], properties: dict[str, Any]) -> dict[str, Any]:
    """The OpenAPI request body of an upload: a binary `file` beside the given text fields."""
    schema = {
        "type": "object",
        "required": ["file", *required],
        "properties": {"file": {"type": "string", "format": "binary"}, **properties},
    }
    return {"requestBody": {"required": True, "content": {"multipart/form-data": {"schema": schema}}}}


class UploadSlots:
    """Uploads in progress, per user and in all: one over either bound is refused (429) before its body is read."""

    def __init__(self, per_user: int, total: int) -> None:
        self.per_user, self.total = per_user, total
        self._by_user: Counter[str] = Counter()

    @contextlib.contextmanager
    def slot(self, user: str) -> Iterator[None]:
        if self._by_user[user] >= self.per_user:
            raise TooManyRequests(
                f"{self._by_user[user]} of your uploads are in progress (at most {self.per_user} at once): send this one "
                "when one has finished",
                field="file",
                retry_after_s=UPLOAD_RETRY_S,
            )
        if sum(self._by_user.values()) >= self.total:
            raise TooManyRequests(
                f"the leader is receiving {self.total} uploads, its most at once: try again shortly",
                field="file",
                retry_after_s=UPLOAD_RETRY_S,
            )
        self._by_user[user] += 1
        try:
            yield
        finally:
            self._by_user[user] -= 1
            if not self._by_user[user]:
                del self._by_user[user]


@contextlib.asynccontextmanager
async def upload_form(request: Request, *, what: str, limit: int, user: str, files: int = 1) -> AsyncIterator[FormData]:
    """The request's multipart form of up to `files` files, read under `limit` bytes in all, while `user` holds one of
    the leader's upload slots (request.app.state.uploads); 415 if not a form, 429 over a slot bound."""
    content_type = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if content_type != "multipart/form-data":
        raise UnsupportedMediaType(f"upload {what} as multipart/form-data", field="Content-Type")
    slots: UploadSlots = request.app.state.uploads
    with slots.slot(user):
        async with limited_request(request, limit + FORM_OVERHEAD_BYTES).form(max_files=files, max_fields=8) as form:
            yield form


def text_field(value: str | UploadFile | None, name: str, pattern: str | None = None) -> str:
    """A required text field of the form, matching `pattern` when given (422 naming the field otherwise)."""
    if not isinstance(value, str) or not value:
        raise InvalidSpec("field required", field=name)
    if pattern is not None and not re.fullmatch(pattern, value):
        raise InvalidSpec("must be letters, digits, . _ - (starting with a letter or digit)", field=name)
    return value


def upload_file(form: FormData, what: str) -> UploadFile:
    """The form's `file` part (422 naming `file` without one)."""
    upload = form.get("file")
    if not isinstance(upload, UploadFile):
        raise InvalidSpec(f"field required ({what})", field="file")
    return upload


async def spooled_chunks(spool: BinaryIO) -> AsyncIterator[bytes]:
    """The spooled file again, chunk by chunk, for GridFS (disk reads off the event loop)."""
    spool.seek(0)
    while chunk := await anyio.to_thread.run_sync(spool.read, CHUNK_BYTES):
        yield chunk
