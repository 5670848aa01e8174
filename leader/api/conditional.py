"""Conditional GETs of the jobs list (the API's and the console's rows): a validator made from what the answer depends
on, so a reader that has the current answer gets 304 with no body, before the page is assembled (a room of open
consoles polls the Jobs page every 3 s; the browser revalidates with If-None-Match)."""

from __future__ import annotations

import hashlib
import time

from starlette.requests import Request
from starlette.responses import Response

# A validator also moves every STALE_AFTER_S: what an answer holds beside the jobs' own state (queue positions and
# estimated starts from the followers' last heartbeats, result tallies) is never kept longer than that.
STALE_AFTER_S = 10.0
CACHE_CONTROL = "private, no-cache"  # a browser keeps the answer and asks again each time, with If-None-Match


def etag(*parts: object) -> str:
    """A weak validator of the answer made from `parts` (and the current STALE_AFTER_S window)."""
    window = int(time.monotonic() // STALE_AFTER_S)
    digest = hashlib.blake2b(repr((*parts, window)).encode(), digest_size=12).hexdigest()
    return f'W/"{digest}"'


def fresh(request: Request, tag: str) -> bool:
    """Whether the request's If-None-Match names `tag` (weak comparison, as RFC 9110 asks for GET)."""
    header = request.headers.get("if-none-match")
    if not header:
        return False
    given = {t.strip().removeprefix("W/") for t in header.split(",")}
    return "*" in given or tag.removeprefix("W/") in given


def not_modified(tag: str) -> Response:
    return Response(status_code=304, headers={"ETag": tag, "Cache-Control": CACHE_CONTROL})


def validated(response: Response, tag: str) -> Response:
    """The answer with its validator."""
    response.headers["ETag"] = tag
    response.headers["Cache-Control"] = CACHE_CONTROL
    return response
