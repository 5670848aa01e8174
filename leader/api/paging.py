"""Cursor paging for lists newest first: a page ends with an opaque cursor naming its last item (time, id).

The next page is asked for with `cursor=`; its address comes back in a `Link: <...>; rel="next"` header and in
`X-Next-Cursor`, so the body stays a plain list. A cursor is stable under inserts: items created later never shift
what a page holds.
"""

from __future__ import annotations

import base64
import binascii
from datetime import datetime

from fastapi import Request, Response

from common.errors import InvalidRequest

Cursor = tuple[datetime, str]


def encode(at: datetime, item_id: str) -> str:
    """The cursor after the item created `at` with id `item_id`."""
    return base64.urlsafe_b64encode(f"{at.isoformat()}|{item_id}".encode()).decode().rstrip("=")


def decode(cursor: str | None) -> Cursor | None:
    """The (time, id) a cursor names; 422 naming `cursor` if it is not one of ours."""
    if cursor is None:
        return None
    try:
        text = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        at, _, item_id = text.partition("|")
        parsed = datetime.fromisoformat(at)
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise InvalidRequest("not a cursor this leader gave out (use the X-Next-Cursor of a page)", field="cursor") from None
    if not item_id or parsed.tzinfo is None:
        raise InvalidRequest("not a cursor this leader gave out (use the X-Next-Cursor of a page)", field="cursor")
    return parsed, item_id


def link_next(request: Request, response: Response, last: Cursor | None) -> None:
    """Point at the next page (a full page was returned, so there may be one)."""
    if last is None:
        return
    cursor = encode(*last)
    url = request.url.include_query_params(cursor=cursor)
    response.headers["Link"] = f'<{url}>; rel="next"'
    response.headers["X-Next-Cursor"] = cursor
