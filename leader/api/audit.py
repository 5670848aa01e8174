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

from fastapi import FastAPI
from starlette.types import ASGIApp, Message, Receive, Scope, Send

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


class _Audit:
    """Records a changing request once the app has answered it, before the answer goes out (an entry is stored, or its
    failure logged, by the time its client reads the answer). A pure ASGI layer: no task or stream per request."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] not in CHANGES:
            await self.app(scope, receive, send)
            return

        async def send_recorded(message: Message) -> None:
            if message["type"] == "http.response.start":
                principal: Principal | None = scope.get("state", {}).get("principal")
                if not (principal is not None and principal.role == "follower" and ROUTINE.match(scope["path"])):
                    await _record(scope, message["status"], principal)
            await send(message)

        await self.app(scope, receive, send_recorded)


def install(app: FastAPI) -> None:
    """Record every changing request once it is answered."""
    app.add_middleware(_Audit)


async def _record(scope: Scope, status: int, principal: Principal | None) -> None:
    client = scope.get("client")
    entry = {
        "_id": uuid.uuid4().hex,
        "at": utcnow(),
        "user": principal.user if principal is not None else None,
        "role": principal.role if principal is not None else None,
        "token_id": principal.token_id if principal is not None else None,
        "method": scope["method"],
        "path": scope["path"],  # never the query: a login form or a cursor is not for the log
        "status": status,
        "client": client[0] if client else None,
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
    resources = getattr(scope["app"].state, "resources", None)
    if resources is None:
        return
    try:
        await audit_store.record(resources.db, entry)
    except Exception as exc:  # noqa: BLE001 - the audit must not fail what it audits
        log.warning("could not store the audit entry for %s %s: %s", scope["method"], scope["path"], exc)
