"""Annotated dependencies: the lifespan's resources, the settings and token auth with roles."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Annotated, TypeVar

import redis.asyncio as aioredis
from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pymongo import AsyncMongoClient
from pymongo.asynchronous.database import AsyncDatabase

from common.base import NAME_PATTERN
from common.errors import Forbidden, InvalidSpec, Unauthorized
from common.wire.auth import DEFAULT_TEAM
from leader.auth.tokens import CSRF_HEADER, SESSION_COOKIE, Principal, csrf_token, same_secret
from leader.clock import Ages
from leader.placement.placer import Placer
from leader.settings import LeaderSettings
from leader.store import followers as followers_store
from leader.store import jobs as jobs_store
from leader.store import lookup
from leader.store import sessions as sessions_store
from leader.store import users as users_store
from leader.store.followers import Beats
from leader.store.joblist import JobIndex


@dataclass
class Resources:
    """What the lifespan creates once and every request shares."""

    settings: LeaderSettings
    client: AsyncMongoClient
    db: AsyncDatabase
    redis: aioredis.Redis
    placer: Placer
    heard: Ages  # monotonic age of each follower's last word (registration, heartbeat): liveness decisions
    jobs_index: JobIndex = field(default_factory=JobIndex)  # the jobs list's order and filters (leader.store.joblist)
    beats: Beats = field(default_factory=Beats)  # each follower's last heartbeat written (leader.store.followers)


def get_resources(request: Request) -> Resources:
    """The app's resources (set by the lifespan)."""
    return request.app.state.resources


def get_settings(request: Request) -> LeaderSettings:
    """The leader's settings."""
    return get_resources(request).settings


def get_db(request: Request) -> AsyncDatabase:
    """The PerfDB database."""
    return get_resources(request).db


def get_heard(request: Request) -> Ages:
    """When each follower was last heard, by monotonic time."""
    return get_resources(request).heard


def get_beats(request: Request) -> Beats:
    """Each follower's last heartbeat written."""
    return get_resources(request).beats


def get_jobs_index(request: Request) -> JobIndex:
    """The jobs list's index."""
    return get_resources(request).jobs_index


def get_placer(request: Request) -> Placer:
    """The placement loop (to nudge it)."""
    return get_resources(request).placer


T = TypeVar("T")


def _on_loop(get: Callable[[Request], T]) -> Callable[[Request], Awaitable[T]]:
    """`get` as a coroutine dependency: FastAPI runs a plain function dependency in a worker thread, and these getters
    were seven thread hand-offs on every heartbeat (a third of the leader's time with 50 followers beating)."""

    async def dependency(request: Request) -> T:
        return get(request)

    return dependency


ResourcesDep = Annotated[Resources, Depends(_on_loop(get_resources))]
SettingsDep = Annotated[LeaderSettings, Depends(_on_loop(get_settings))]
Db = Annotated[AsyncDatabase, Depends(_on_loop(get_db))]
PlacerDep = Annotated[Placer, Depends(_on_loop(get_placer))]
HeardDep = Annotated[Ages, Depends(_on_loop(get_heard))]
BeatsDep = Annotated[Beats, Depends(_on_loop(get_beats))]
JobIndexDep = Annotated[JobIndex, Depends(_on_loop(get_jobs_index))]

# auto_error=False: a missing header is answered by our own 401 in the common error shape.
_bearer = HTTPBearer(auto_error=False)
Credentials = Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
# A cookie is sent by the browser on its own: it authenticates reads, and writes only with the session's CSRF token in
# the X-CSRF-Token header (which a page of the leader's carries and another site's page cannot read or forge).
_COOKIE_READS = frozenset({"GET", "HEAD"})


async def authenticate(resources: Resources, token: str) -> Principal | None:
    """Who a raw token stands for: the bootstrap admin, the follower join token, or a stored (hashed) token."""
    settings = resources.settings
    # Check both static secrets (no early exit) in constant time before the stored ones.
    is_admin = same_secret(token, settings.admin_token.get_secret_value())
    is_join = same_secret(token, settings.follower_token.get_secret_value())
    if is_admin:
        return Principal(user="admin", role="admin")
    if is_join:
        return Principal(user="join", role="join")
    return await users_store.principal_for(resources.db, token=token)


async def session_principal(resources: Resources, session_id: str) -> Principal | None:
    """Who a web session (the login cookie) stands for, while it and its token live."""
    admin = resources.settings.admin_token.get_secret_value()
    return await sessions_store.principal_for(resources.db, session_id=session_id, admin_token=admin)


async def get_principal(request: Request, resources: ResourcesDep, credentials: Credentials) -> Principal:
    """The caller, from the bearer token (or, for reads, the web login's session cookie); 401 otherwise."""
    principal = None
    if credentials is not None:
        principal = await authenticate(resources, credentials.credentials)
    elif session_id := request.cookies.get(SESSION_COOKIE):
        if request.method not in _COOKIE_READS and not same_secret(request.headers.get(CSRF_HEADER, ""), csrf_token(session_id)):
            raise Forbidden("a write from a web session needs its CSRF token (the page's csrf-token)", field=CSRF_HEADER)
        principal = await session_principal(resources, session_id)
    if principal is None:
        raise Unauthorized("missing or wrong bearer token")
    request.state.principal = principal  # for the audit log
    return principal


PrincipalDep = Annotated[Principal, Depends(get_principal)]


def _require_user(role: str) -> Callable[[Principal], Awaitable[Principal]]:
    async def check(principal: PrincipalDep) -> Principal:
        if principal.role in ("follower", "join"):
            # Agent credentials are not user credentials: answer as if no token was given.
            raise Unauthorized("missing or wrong bearer token")
        if not principal.at_least(role):
            raise Forbidden(f"this needs the {role} role; the token has {principal.role}", field="Authorization")
        return principal

    return check


async def require_follower(principal: PrincipalDep) -> Principal:
    """Follower routes: a follower credential or an admin (each route checks the follower id matches)."""
    if principal.role == "follower" or principal.is_admin:
        return principal
    if principal.role == "join":
        raise Forbidden("the join token only registers; use the credential registration returned", field="Authorization")
    raise Unauthorized("missing or wrong bearer token")


async def require_reader(principal: PrincipalDep, db: Db) -> Principal:
    """Model metadata and bytes: any user, or an approved follower fetching the model of its task (a pending one reads
    nothing of any team's)."""
    if principal.role == "join":
        raise Forbidden("the join token only registers; use the credential registration returned", field="Authorization")
    if principal.role == "follower" and not await followers_store.is_approved(db, follower_id=principal.follower_id or ""):
        raise Forbidden(f"follower {principal.follower_id} awaits an admin's approval", field="Authorization")
    return principal


async def require_joining(principal: PrincipalDep) -> Principal:
    """Registration: the join token, a follower credential or an admin."""
    if principal.role in ("join", "follower") or principal.is_admin:
        return principal
    raise Unauthorized("missing or wrong bearer token")


require_viewer = _require_user("viewer")
require_submitter = _require_user("submitter")
require_admin = _require_user("admin")

ViewerAuth = Depends(require_viewer)
SubmitterAuth = Depends(require_submitter)
AdminAuth = Depends(require_admin)
FollowerAuth = Depends(require_follower)
ReaderAuth = Depends(require_reader)
Viewer = Annotated[Principal, Depends(require_viewer)]


async def job_ref(job_id: str, db: Db, viewer: Viewer) -> str:
    """A job route's job: its id, or a unique start of it (what the console and the CLI show), as the caller's team
    sees it; an unknown id and another team's answer the same 404."""
    return await lookup.resolve_prefix(db, jobs_store.COLLECTION, job_id, what="job", team=viewer.scope)


JobId = Annotated[str, Depends(job_ref)]
Reader = Annotated[Principal, Depends(require_reader)]
Submitter = Annotated[Principal, Depends(require_submitter)]
Admin = Annotated[Principal, Depends(require_admin)]
FollowerPrincipal = Annotated[Principal, Depends(require_follower)]
Joining = Annotated[Principal, Depends(require_joining)]


def team_of_upload(principal: Principal, asked: object) -> str:
    """The team an upload goes to: the uploader's own; an admin names one (`team`, default: the default team)."""
    if not asked:
        return principal.team if not principal.is_admin else DEFAULT_TEAM
    if not isinstance(asked, str) or not re.fullmatch(NAME_PATTERN, asked):
        raise InvalidSpec(f"team must match {NAME_PATTERN}", field="team")
    if principal.is_admin:
        return asked
    if asked != principal.team:
        raise Forbidden(f"this token is of team {principal.team}; it cannot upload for team {asked}", field="team")
    return principal.team


def check_follower(principal: Principal, follower_id: str) -> None:
    """403 unless the caller is this follower (or an admin)."""
    if not principal.may_act_as_follower(follower_id):
        raise Forbidden(f"this credential does not belong to follower {follower_id}", field="follower_id")
