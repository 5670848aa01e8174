"""Teams sharing the fleet and what they used: a team's settings and standing, and the accounting of follower time."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictFloat, field_validator

from common import egress
from common.fairshare import DEFAULT_WEIGHT

UsageBy = Literal["team", "user", "follower_class", "follower"]


FollowerClass = Annotated[str, Field(pattern=r"^[A-Za-z0-9*][A-Za-z0-9 ._-]{0,63}$")]


class TeamSettings(BaseModel):
    """What an admin sets for a team."""

    model_config = ConfigDict(extra="forbid")

    weight: Annotated[StrictFloat, Field(gt=0, le=1000)] = DEFAULT_WEIGHT  # its share of a contended fleet, against others'
    # Follower-hours a day (UTC) it may use per follower class (`*`: every class not named); past it, its jobs wait
    # for the next day (or for a follower of another class), queued with the reason.
    quota_hours_per_day: Annotated[dict[FollowerClass, Annotated[StrictFloat, Field(ge=0, le=24_000)]], Field(max_length=64)] = {}
    # The loopback, private and other non-public addresses (networks) its jobs' targets may be, beside the public
    # internet (common/egress.py); the leader's own BENCHFLEET_LEADER_EGRESS_ALLOW is added for every team.
    egress_allow: Annotated[list[Annotated[str, Field(max_length=64)]], Field(max_length=egress.MAX_ALLOWED)] = []

    @field_validator("egress_allow")
    @classmethod
    def _networks(cls, value: list[str]) -> list[str]:
        return [str(n) for n in egress.networks(value)]


class TeamView(BaseModel):
    """A team's standing now: its weight, its fair share among the teams contending, what it used in the window."""

    team: str
    weight: float
    active: bool  # it has work waiting or running
    used_s: float  # follower seconds in the sliding window
    use_share: float | None  # its share of the follower seconds the contending teams used (None: it does not contend)
    fair_share: float | None  # its weight over the contending teams' (None: it does not contend)
    window_s: float
    quota_hours_per_day: dict[str, float] = {}
    used_today_hours: dict[str, float] = {}  # follower-hours used since 00:00 UTC, by follower class
    egress_allow: list[str] = []  # the team's own allow-list (the leader's is added to it: see LeaderSettings)


class UsageRow(BaseModel):
    """Follower time used by one team, user, follower class or follower over a period."""

    key: str
    attempts: int  # runs that overlapped the period (a requeued job's earlier runs count: they held a follower)
    jobs: int
    follower_hours: float
    gpu_hours: float  # follower hours times the follower's GPUs
    cost: float | None  # follower hours at the configured price of each run's follower class (None: no price set)


class UsageReport(BaseModel):
    """Accounting over [since, until): one row per key, the largest first, and the total."""

    since: datetime
    until: datetime
    by: UsageBy
    currency: str
    rows: list[UsageRow]
    total: UsageRow
