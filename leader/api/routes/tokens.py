"""Admin routes for API tokens: create (the secret is shown once), list (never secrets) and revoke."""

from __future__ import annotations

import logging

from fastapi import APIRouter

from common.wire.auth import TokenCreate, TokenIssued, TokenView
from leader.api.deps import AdminAuth, Db, SettingsDep
from leader.store import users as users_store

log = logging.getLogger(__name__)

router = APIRouter(prefix="/tokens", tags=["tokens"], dependencies=[AdminAuth])


@router.post("", status_code=201, response_model=TokenIssued)
async def create_token(body: TokenCreate, db: Db, settings: SettingsDep) -> TokenIssued:
    """Issue a token for a user with a role; the reply holds the secret, which is never shown again. It expires after
    `expires_in_s` (default: the leader's token_ttl_s; 0 there means never)."""
    ttl = body.expires_in_s if body.expires_in_s is not None else (settings.token_ttl_s or None)
    issued = await users_store.create_token(
        db, user=body.user, role=body.role, label=body.label, expires_in_s=ttl, team=body.team
    )
    # The id identifies the token in logs; the secret never appears there.
    log.info("token %s issued to %s (%s, team %s)", issued.id, issued.user, issued.role, issued.team)
    return issued


@router.get("", response_model=list[TokenView])
async def list_tokens(db: Db) -> list[TokenView]:
    """Every token (user, role, revoked), without secrets."""
    return await users_store.list_tokens(db)


@router.delete("/{token_id}", response_model=TokenView)
async def revoke_token(token_id: str, db: Db) -> TokenView:
    """Revoke a token at once (repeating it is harmless)."""
    view = await users_store.revoke_token(db, token_id=token_id)
    log.info("token %s of %s revoked", view.id, view.user)
    return view
