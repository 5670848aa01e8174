"""Annotated dependencies: the lifespan's resources, the settings and bearer-token auth."""

from __future__ import annotations

import hmac
from dataclasses import dataclass
from typing import Annotated

import redis.asyncio as aioredis
from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from motor.motor_asyncio import AsyncIOMotorClient, AsyncIOMotorDatabase

from common.errors import Unauthorized
from leader.scheduler.placement import Placer
from leader.settings import LeaderSettings


@dataclass
class Resources:
    """What the lifespan creates once and every request shares."""

    settings: LeaderSettings
    client: AsyncIOMotorClient
    db: AsyncIOMotorDatabase
    redis: aioredis.Redis
    placer: Placer


def get_resources(request: Request) -> Resources:
    """The app's resources (set by the lifespan)."""
    return request.app.state.resources


def get_settings(request: Request) -> LeaderSettings:
    """The leader's settings."""
    return get_resources(request).settings


def get_db(request: Request) -> AsyncIOMotorDatabase:
    """The PerfDB database."""
    return get_resources(request).db


def get_placer(request: Request) -> Placer:
    """The placement loop (to nudge it)."""
    return get_resources(request).placer


ResourcesDep = Annotated[Resources, Depends(get_resources)]
SettingsDep = Annotated[LeaderSettings, Depends(get_settings)]
Db = Annotated[AsyncIOMotorDatabase, Depends(get_db)]
PlacerDep = Annotated[Placer, Depends(get_placer)]

# auto_error=False: a missing header is answered by our own 401 in the common error shape.
_bearer = HTTPBearer(auto_error=False)
Credentials = Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]


def _matches(credentials: HTTPAuthorizationCredentials | None, *tokens: str) -> bool:
    if credentials is None:
        return False
    given = credentials.credentials.encode()
    # Compare against every token (no early exit) in constant time.
    results = [hmac.compare_digest(given, token.encode()) for token in tokens]
    return any(results)


def require_admin(settings: SettingsDep, credentials: Credentials) -> None:
    """User routes: the admin token."""
    if not _matches(credentials, settings.admin_token.get_secret_value()):
        raise Unauthorized("missing or wrong bearer token")


def require_follower(settings: SettingsDep, credentials: Credentials) -> None:
    """Follower routes: the follower token (the admin token works too)."""
    if not _matches(credentials, settings.follower_token.get_secret_value(), settings.admin_token.get_secret_value()):
        raise Unauthorized("missing or wrong bearer token")


AdminAuth = Depends(require_admin)
FollowerAuth = Depends(require_follower)
