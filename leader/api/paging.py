"""Cursor paging for lists newest first: a page ends with an opaque cursor naming its last item (time, id).

The next page is asked for with `cursor=`; its address comes back in a `Link: <...>; rel="next"` header and in
`X-Next-Cursor`, so the body stays a plain list. A cursor is stable under inserts: items created later never shift
what a page holds.
"""

from __future__ import annotations

import base64
import binascii
from collections import OrderedDict
from datetime import datetime

from fastapi import Request, Response
from pydantic import TypeAdapter

from common.errors import InvalidRequest
from common.wire.jobs import JobView

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


# Each listed job's JSON, by what its view is made of: a page of unchanged jobs is written once, not per read (writing
# 100 jobs' specs and histories was the jobs list's largest cost once its reads were cheap).
MAX_WRITTEN = 4096
_written: OrderedDict[tuple[object, ...], bytes] = OrderedDict()
_JOB = TypeAdapter(JobView)


def jobs_json(jobs: list[JobView]) -> bytes:
    """The JSON of a list of jobs, as the route's response model writes it, each job's written once per change: a
    stored job changes only with its updated_at, but for the reason it waits and a split job's parts' progress."""
    parts = []
    for job in jobs:
        key = (job.id, job.updated_at, job.waiting_reason, job.points_done, job.queue_position, job.estimated_start)
        written = _written.get(key)
        if written is None:
            written = _written[key] = _JOB.dump_json(job, by_alias=True)
            if len(_written) > MAX_WRITTEN:
                _written.popitem(last=False)
        else:
            _written.move_to_end(key)
        parts.append(written)
    return b"[" + b",".join(parts) + b"]"
