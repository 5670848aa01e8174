"""Token secrets and principals: who a request is, decided from its bearer token.

Tokens are 256-bit random strings, so a plain sha256 stored at rest is enough: slow password hashes
(bcrypt, scrypt) exist to protect low-entropy human passwords from guessing, and nobody can guess or
invert a 2^256 preimage. A fast hash also lets the lookup be one indexed query by hash.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass

from common.wire.auth import DEFAULT_TEAM, ROLE_RANK

TOKEN_PREFIX = "bf_"
TOKEN_BYTES = 32
# The name of the cookie the web login sets (HttpOnly): a server-side session's id (leader/store/sessions.py).
SESSION_COOKIE = "benchfleet_session"
# The header a page's script sends its session's CSRF token in (and the field a page's form sends it as).
CSRF_HEADER = "X-CSRF-Token"
CSRF_FIELD = "csrf"


def new_token() -> str:
    """A fresh high-entropy token (shown once, stored only as its hash)."""
    return TOKEN_PREFIX + secrets.token_urlsafe(TOKEN_BYTES)


def hash_token(token: str) -> str:
    """The sha256 hex digest stored and looked up in place of the token."""
    return hashlib.sha256(token.encode()).hexdigest()


def csrf_token(session_id: str) -> str:
    """The CSRF token of a web session: derived from its id (which only the browser holding the cookie has), so a page
    carries it for its forms and scripts while another site's page, which can make the browser send the cookie but
    cannot read it, cannot forge it. Nothing is stored; it lives and dies with the session."""
    return hmac.new(session_id.encode(), b"benchfleet-csrf", hashlib.sha256).hexdigest()


def same_secret(given: str, expected: str) -> bool:
    """Constant-time comparison of two secrets."""
    return hmac.compare_digest(given.encode(), expected.encode())


@dataclass(frozen=True)
class Principal:
    """The caller: a user with a role, a follower agent with its id, or a joining agent (join token)."""

    user: str
    role: str  # viewer | submitter | admin | follower | join
    follower_id: str | None = None
    token_id: str | None = None
    team: str = DEFAULT_TEAM  # a user's team (admins and agents see every team: `scope` is None for them)

    @property
    def scope(self) -> str | None:
        """The one team whose jobs, models, data and results this caller sees; None: every team."""
        return None if self.role in ("admin", "follower") else self.team

    @property
    def is_admin(self) -> bool:
        return self.role == "admin"

    def at_least(self, role: str) -> bool:
        """Whether this user role includes `role` (follower and join tokens have no user rank)."""
        return ROLE_RANK.get(self.role, 0) >= ROLE_RANK[role]

    def may_act_as_follower(self, follower_id: str) -> bool:
        """Follower routes: the follower's own credential, or an admin."""
        return self.is_admin or (self.role == "follower" and self.follower_id == follower_id)

    def may_manage(self, owner: str) -> bool:
        """Cancel/delete: the owner (a submitter or above), or an admin."""
        return self.is_admin or (self.at_least("submitter") and self.user == owner)
