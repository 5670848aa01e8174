"""API tokens and roles: what the admin token routes take and return, and what a follower receives at registration."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from common.base import NAME_PATTERN

# viewer reads; submitter also submits jobs and uploads models (cancelling/deleting only its own); admin does all.
UserRole = Literal["viewer", "submitter", "admin"]
# follower: an agent's own credential, bound to its follower id (issued at registration, never by hand).
Role = Literal["viewer", "submitter", "admin", "follower"]
ROLE_RANK: dict[str, int] = {"viewer": 1, "submitter": 2, "admin": 3}
# Teams scope what a user sees and changes: a viewer or submitter reads only its team's jobs, models, data sets,
# results and baselines (another team's answer 404, as if absent); admins and follower agents see every team. Data
# stored before teams, and tokens issued without one, are the default team's.
DEFAULT_TEAM = "default"
Team = Annotated[str, Field(pattern=NAME_PATTERN, description="A team: it scopes what the token's user sees")]


class TokenCreate(BaseModel):
    """An admin asks for a new user token."""

    model_config = ConfigDict(extra="forbid")

    user: Annotated[str, Field(pattern=NAME_PATTERN)]
    role: UserRole
    team: Team = DEFAULT_TEAM  # an admin token sees every team whatever this says
    label: Annotated[str, Field(max_length=200, pattern=r"^[^\x00-\x1f\x7f]*$")] = ""
    # Seconds the token lives (at most a year); None: the leader's token_ttl_s (0 there: tokens do not expire).
    expires_in_s: Annotated[int, Field(ge=60, le=366 * 86400)] | None = None


class TokenView(BaseModel):
    """A stored token as the API lists it: never the secret, never its hash."""

    id: str
    user: str
    role: Role
    team: str = DEFAULT_TEAM
    label: str = ""
    follower_id: str | None = None
    created_at: datetime
    revoked: bool = False
    expires_at: datetime | None = None  # after it the token is refused (401); None: it does not expire


class TokenIssued(TokenView):
    """The reply to a creation: the secret, shown this once (only its sha256 is stored)."""

    token: str
