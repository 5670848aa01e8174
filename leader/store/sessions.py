"""Web sessions kept by the leader: the login cookie holds a random session id, never an API token.

A session stands for the principal whose token logged in. It ends at logout, after its lifetime, or as soon as that
token is revoked or expires (checked on every use); a session of the bootstrap admin token ends when the leader's
admin token changes. Only the session id's sha256 is stored, as for tokens.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from pymongo import ASCENDING
from pymongo.asynchronous.database import AsyncDatabase

from leader.auth.tokens import Principal, hash_token, new_token, same_secret
from leader.clock import as_utc, utcnow
from leader.store import users as users_store

COLLECTION = "sessions"
_sessions = users_store.Recent()  # session id hash → its document, as lately read


async def ensure_indexes(db: AsyncDatabase) -> None:
    """Sessions are found by the hash of their id (the _id); expired ones are swept by expiry time."""
    await db[COLLECTION].create_index([("expires_at", ASCENDING)])


async def start(db: AsyncDatabase, *, principal: Principal, token: str, ttl_s: float) -> str:
    """A new session for the principal that `token` authenticated; returns its id (shown to the browser only)."""
    now = utcnow()
    await db[COLLECTION].delete_many({"expires_at": {"$lte": now}})  # sweep: logins are rare, sessions few
    session_id = new_token()
    await db[COLLECTION].insert_one(
        {
            "_id": hash_token(session_id),
            "user": principal.user,
            "role": principal.role,
            "team": principal.team,
            "token_id": principal.token_id,
            # The bootstrap admin token has no stored record to revoke: remember which secret it was.
            "static_hash": hash_token(token) if principal.token_id is None else None,
            "created_at": now,
            "expires_at": now + timedelta(seconds=ttl_s),
        }
    )
    return session_id


async def principal_for(db: AsyncDatabase, *, session_id: str, admin_token: str) -> Principal | None:
    """The principal of a live session whose token is still live; None otherwise (a session's document is read at most
    every users.PRINCIPAL_TTL_S; a logout here ends it at once)."""
    hashed = hash_token(session_id)
    doc: dict[str, Any] | None = _sessions.get(db, hashed)
    if doc is None:
        doc = await db[COLLECTION].find_one({"_id": hashed})
        if doc is not None:
            _sessions.put(db, hashed, doc)
    if doc is None or as_utc(doc["expires_at"]) <= utcnow():
        return None
    if doc.get("token_id") is not None:
        if not await users_store.token_live(db, token_id=doc["token_id"]):
            return None
    elif not same_secret(doc.get("static_hash") or "", hash_token(admin_token)):
        return None
    return Principal(user=doc["user"], role=doc["role"], token_id=doc.get("token_id"), team=doc["team"])


async def end(db: AsyncDatabase, *, session_id: str) -> None:
    """Forget a session (logout); unknown ids are ignored."""
    await db[COLLECTION].delete_one({"_id": hash_token(session_id)})
    _sessions.forget(db, lambda doc: doc["_id"] == hash_token(session_id))
