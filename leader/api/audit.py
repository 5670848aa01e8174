"""The audit trail: every request that changes something, with the principal who made it and the answer it got.

Followers' routine reports (heartbeats, point results, progress) are left out: they are the fleet talking, not
someone acting. Refused attempts (401, 403) are kept: they are what an audit is for. Each entry is logged (logger
`benchfleet.audit`) and stored in PerfDB (GET /api/v1/audit, admins only); a failure to store it never fails the
request.
"""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Awaitable, Callable

from fastapi import FastAPI, Request, Response

from leader.auth.tokens import Principal
from leader.clock import utcnow
from leader.store import audit as audit_store

log = logging.getLogger("benchfleet.audit")

CHANGES = frozenset({"POST", "PUT", "PATCH", "DELETE"})
# A follower's own routine traffic (it acts for the fleet, many times a second): not audited.
ROUTINE = re.compile(
    r"^/api/v1/(followers/[^/]+/heartbeat|jobs/[^/]+/(points|progress|records|finish|claim)"
    r"|jobs/[^/]+/shards/\d+/points/\d+/(ready|records))$"
)


def install(app: FastAPI) -> None:
    """Record every changing request once it is answered."""

    @app.middleware("http")
    async def _audit(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        response = await call_next(request)
        if request.method in CHANGES:
            principal: Principal | None = getattr(request.state, "principal", None)
            if not (principal is not None and principal.role == "follower" and ROUTINE.match(request.url.path)):
                await _record(request, response.status_code, principal)
        return response


async def _record(request: Request, status: int, principal: Principal | None) -> None:
    entry = {
        "_id": uuid.uuid4().hex,
        "at": utcnow(),
        "user": principal.user if principal is not None else None,
        "role": principal.role if principal is not None else None,
        "token_id": principal.token_id if principal is not None else None,
        "method": request.method,
        "path": request.url.path,  # never the query: a login form or a cursor is not for the log
        "status": status,
        "client": request.client.host if request.client is not None else None,
    }
    log.info(
        "%s %s -> %d by %s (%s) from %s",
        entry["method"],
        entry["path"],
        status,
        entry["user"] or "anonymous",
        entry["role"] or "-",
        entry["client"],
    )
    resources = getattr(request.app.state, "resources", None)
    if resources is None:
        return
    try:
        await audit_store.record(resources.db, entry)
    except Exception as exc:  # noqa: BLE001 - the audit must not fail what it audits
        log.warning("could not store the audit entry for %s %s: %s", request.method, request.url.path, exc)
