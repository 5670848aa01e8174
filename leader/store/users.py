"""API tokens in PerfDB: one document per token holding its sha256 (never the token), user, role and revocation."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

from pymongo import ASCENDING
from pymongo.asynchronous.database import AsyncDatabase

from common.errors import NotFound
from common.wire.auth import DEFAULT_TEAM, TokenIssued, TokenView
from leader.auth.tokens import Principal, hash_token, new_token
from leader.clock import as_utc, utcnow

COLLECTION = "tokens"


async def ensure_indexes(db: AsyncDatabase) -> None:
    """Lookups are by hash (unique); follower credentials are found by follower id when re-issued."""
    await db[COLLECTION].create_index([("hash", ASCENDING)], unique=True)
    await db[COLLECTION].create_index([("follower_id", ASCENDING)])


def _view(doc: dict[str, Any]) -> TokenView:
    return TokenView(
        id=doc["_id"],
        user=doc["user"],
        role=doc["role"],
        team=doc["team"],
        label=doc.get("label", ""),
        follower_id=doc.get("follower_id"),
        created_at=as_utc(doc["created_at"]),
        revoked=doc.get("revoked_at") is not None,
        expires_at=as_utc(doc["expires_at"]) if doc.get("expires_at") else None,
    )


async def create_token(
    db: AsyncDatabase,
    *,
    user: str,
    role: str,
    label: str = "",
    follower_id: str | None = None,
    expires_in_s: float | None = None,
    team: str = DEFAULT_TEAM,
) -> TokenIssued:
    """Store a new token's hash (acknowledged before the secret is returned, once); it expires after `expires_in_s`."""
    token = new_token()
    now = utcnow()
    doc = {
        "_id": uuid.uuid4().hex,
        "hash": hash_token(token),
        "user": user,
        "role": role,
        "team": team,
        "label": label,
        "follower_id": follower_id,
        "created_at": now,
        "revoked_at": None,
        "expires_at": now + timedelta(seconds=expires_in_s) if expires_in_s else None,
    }
    await db[COLLECTION].insert_one(doc)
    return TokenIssued(**_view(doc).model_dump(), token=token)


async def principal_for(db: AsyncDatabase, *, token: str) -> Principal | None:
    """The principal a live (not revoked, not expired) token stands for, or None."""
    doc = await db[COLLECTION].find_one({"hash": hash_token(token), "revoked_at": None})
    if doc is None or _expired(doc):
        return None
    return Principal(
        user=doc["user"],
        role=doc["role"],
        follower_id=doc.get("follower_id"),
        token_id=doc["_id"],
        team=doc["team"],
    )


def _expired(doc: dict[str, Any]) -> bool:
    return doc.get("expires_at") is not None and as_utc(doc["expires_at"]) <= utcnow()


async def token_live(db: AsyncDatabase, *, token_id: str) -> bool:
    """Whether the stored token exists, is not revoked and has not expired."""
    doc = await db[COLLECTION].find_one({"_id": token_id, "revoked_at": None}, {"expires_at": 1})
    return doc is not None and not _expired(doc)


async def list_tokens(db: AsyncDatabase) -> list[TokenView]:
    """Every token, oldest first, without secrets."""
    docs = await db[COLLECTION].find({}, {"hash": 0}).sort("created_at", ASCENDING).to_list(None)
    return [_view(doc) for doc in docs]


async def revoke_token(db: AsyncDatabase, *, token_id: str) -> TokenView:
    """Revoke a token at once (idempotent); NotFound if unknown."""
    await db[COLLECTION].update_one({"_id": token_id, "revoked_at": None}, {"$set": {"revoked_at": utcnow()}})
    doc = await db[COLLECTION].find_one({"_id": token_id}, {"hash": 0})
    if doc is None:
        raise NotFound(f"token {token_id} does not exist", field="token_id")
    return _view(doc)


async def revoke_follower_credentials(db: AsyncDatabase, *, follower_id: str) -> int:
    """Revoke a follower's earlier credentials (a rejoining agent gets a fresh one); returns how many."""
    result = await db[COLLECTION].update_many(
        {"follower_id": follower_id, "role": "follower", "revoked_at": None}, {"$set": {"revoked_at": utcnow()}}
    )
    return result.modified_count
