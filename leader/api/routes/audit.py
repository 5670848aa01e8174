"""GET /audit: the audit trail, newest first (admins only), a page at a time."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Query, Request, Response
from pydantic import BaseModel

from leader.api import paging
from leader.api.deps import AdminAuth, Db
from leader.store import audit as audit_store

router = APIRouter(prefix="/audit", tags=["audit"], dependencies=[AdminAuth])


class AuditEntry(BaseModel):
    """One changing request: who (user, role, token id), what (method, path), the answer, from where."""

    id: str
    at: datetime
    user: str | None
    role: str | None
    token_id: str | None = None
    method: str
    path: str
    status: int
    client: str | None = None


@router.get("", response_model=list[AuditEntry])
async def audit_log(
    request: Request,
    response: Response,
    db: Db,
    user: Annotated[str | None, Query(max_length=64)] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    cursor: Annotated[str | None, Query(max_length=200)] = None,
) -> list[AuditEntry]:
    """Who changed what, newest first (optionally one user's); a full page names the next in `Link`/`X-Next-Cursor`."""
    rows = [AuditEntry(**row) for row in await audit_store.entries(db, user=user, limit=limit, after=paging.decode(cursor))]
    paging.link_next(request, response, (rows[-1].at, rows[-1].id) if len(rows) == limit else None)
    return rows
