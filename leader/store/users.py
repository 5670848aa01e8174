"""API tokens in PerfDB: one document per token holding its sha256 (never the token), user, role and revocation."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from pymongo import ASCENDING
from pymongo.asynchronous.database import AsyncDatabase

from common.errors import NotFound
from common.wire.auth import DEFAULT_TEAM, TokenIssued, TokenView
from leader.auth.tokens import Principal, hash_token, new_token
from leader.clock import as_utc, utcnow

COLLECTION = "tokens"
# A live token's principal is read from PerfDB at most every PRINCIPAL_TTL_S (every heartbeat and read once looked it
# up: half of a beat's database work). This leader's own revocations take effect at once; a revocation written by
# another process (a script, a second leader on the same database) within PRINCIPAL_TTL_S. Unknown tokens are never
# kept, and an expired one is refused as it expires.
PRINCIPAL_TTL_S = 5.0
MAX_RECENT = 10_000


class Recent:
    """What was read about a token (or a session) lately, by (database, key), with when it was read."""

    def __init__(self) -> None:
        self._seen: dict[tuple[str, str], tuple[float, Any]] = {}

    def get(self, db: AsyncDatabase, key: str) -> Any:
        seen = self._seen.get((db.name, key))
        if seen is None or time.monotonic() - seen[0] >= PRINCIPAL_TTL_S:
            return None
        return seen[1]

    def put(self, db: AsyncDatabase, key: str, value: Any) -> None:
        if len(self._seen) >= MAX_RECENT:
            self._seen.clear()
        self._seen[(db.name, key)] = (time.monotonic(), value)

    def forget(self, db: AsyncDatabase, drop: Callable[[Any], bool]) -> None:
        """Forget every entry of `db` whose value `drop` selects."""
        for key in [k for k, (_, v) in self._seen.items() if k[0] == db.name and drop(v)]:
            del self._seen[key]


_principals = Recent()  # token hash → (Principal, expires_at)
_live = Recent()  # token id → expires_at, for sessions (a session lives while its token does)


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
    hashed = hash_token(token)
    kept = _principals.get(db, hashed)
    if kept is not None:
        return None if _expired({"expires_at": kept[1]}) else kept[0]
    doc = await db[COLLECTION].find_one({"hash": hashed, "revoked_at": None})
    if doc is None or _expired(doc):
        return None
    principal = Principal(
        user=doc["user"],
        role=doc["role"],
        follower_id=doc.get("follower_id"),
        token_id=doc["_id"],
        team=doc["team"],
    )
    _principals.put(db, hashed, (principal, doc.get("expires_at")))
    return principal


def _expired(doc: dict[str, Any]) -> bool:
    return doc.get("expires_at") is not None and as_utc(doc["expires_at"]) <= utcnow()


async def token_live(db: AsyncDatabase, *, token_id: str) -> bool:
    """Whether the stored token exists, is not revoked and has not expired."""
    kept = _live.get(db, token_id)
    if kept is not None:
        return not _expired({"expires_at": kept[0]})
    doc = await db[COLLECTION].find_one({"_id": token_id, "revoked_at": None}, {"expires_at": 1})
    if doc is None or _expired(doc):
        return False
    _live.put(db, token_id, (doc.get("expires_at"),))
    return True


def _forget(db: AsyncDatabase, revoked: Callable[[Principal], bool]) -> None:
    """Drop at once what is kept of the tokens `revoked` selects (sessions check their token's life again)."""
    _principals.forget(db, lambda kept: revoked(kept[0]))
    _live.forget(db, lambda kept: True)


async def list_tokens(db: AsyncDatabase) -> list[TokenView]:
    """Every token, oldest first, without secrets."""
    docs = await db[COLLECTION].find({}, {"hash": 0}).sort("created_at", ASCENDING).to_list(None)
    return [_view(doc) for doc in docs]


async def revoke_token(db: AsyncDatabase, *, token_id: str) -> TokenView:
    """Revoke a token at once (idempotent); NotFound if unknown."""
    await db[COLLECTION].update_one({"_id": token_id, "revoked_at": None}, {"$set": {"revoked_at": utcnow()}})
    _forget(db, lambda principal: principal.token_id == token_id)
    doc = await db[COLLECTION].find_one({"_id": token_id}, {"hash": 0})
    if doc is None:
        raise NotFound(f"token {token_id} does not exist", field="token_id")
    return _view(doc)


async def revoke_follower_credentials(db: AsyncDatabase, *, follower_id: str) -> int:
    """Revoke a follower's earlier credentials (a rejoining agent gets a fresh one); returns how many."""
    result = await db[COLLECTION].update_many(
        {"follower_id": follower_id, "role": "follower", "revoked_at": None}, {"$set": {"revoked_at": utcnow()}}
    )
    _forget(db, lambda principal: principal.role == "follower" and principal.follower_id == follower_id)
    return result.modified_count
