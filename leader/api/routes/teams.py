"""Teams sharing the fleet: GET /teams (each team's weight, fair share, use now and quotas), PUT /teams/{team} (an
admin sets its weight, daily quotas and the non-public networks its targets may be), GET /usage (follower- and
GPU-hours by team, user, follower class or follower over a period, with their cost). A user sees only their own
team's."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Annotated

from fastapi import APIRouter, Path, Query

from common.base import NAME_PATTERN
from common.errors import InvalidRequest
from common.fairshare import WINDOW_S
from common.wire.teams import TeamSettings, TeamView, UsageBy, UsageReport
from leader.api.deps import Admin, Db, PlacerDep, SettingsDep, Viewer
from leader.clock import as_utc, utcnow
from leader.placement.book import JobBook
from leader.store import teams as teams_store
from leader.store import usage as usage_store

router = APIRouter(tags=["teams"])

# The longest period one accounting request sums (a year and a day: a yearly report with room for a leap day).
MAX_PERIOD = timedelta(days=366)


async def _views(db: Db, placer: PlacerDep, only: str | None) -> list[TeamView]:
    uses = await placer.sharing.uses(placer.book or JobBook())  # the placer's book as its last tick left it
    settings = await teams_store.settings(db)
    today = await usage_store.day_use(db, now=utcnow())
    names = [t for t in await teams_store.known(db) if only is None or t == only] or ([only] if only else [])
    active = {t: u for t, u in uses.items() if u.active}
    weight_sum = sum(u.weight for u in active.values())
    used_sum = sum(u.used_s for u in active.values())
    views = []
    for team in names:
        use = uses.get(team)
        contends = use is not None and use.active
        views.append(
            TeamView(
                team=team,
                weight=settings.get(team, TeamSettings()).weight,
                active=contends,
                used_s=round(use.used_s if use else 0.0, 3),
                use_share=round(use.used_s / used_sum, 4) if contends and use and used_sum > 0 else None,
                fair_share=round(use.weight / weight_sum, 4) if contends and use and weight_sum > 0 else None,
                window_s=WINDOW_S,
                quota_hours_per_day=settings.get(team, TeamSettings()).quota_hours_per_day,
                egress_allow=settings.get(team, TeamSettings()).egress_allow,
                used_today_hours={cls: round(h, 4) for (t, cls), h in today.items() if t == team},
            )
        )
    return views


@router.get("/teams", response_model=list[TeamView])
async def list_teams(db: Db, placer: PlacerDep, principal: Viewer) -> list[TeamView]:
    """Every team (a user: their own) with its weight, whether it contends for the fleet now, its use of follower time
    over the sliding window, and its fair share against its share of use."""
    return await _views(db, placer, principal.scope)


@router.put("/teams/{team}", response_model=TeamView)
async def set_team(
    team: Annotated[str, Path(pattern=NAME_PATTERN, max_length=64)],
    settings: TeamSettings,
    db: Db,
    placer: PlacerDep,
    admin: Admin,
) -> TeamView:
    """Set a team's weight, daily quotas and egress allow-list (admins; what is not given goes back to its default):
    under contention its share of follower time follows weight / the contending teams' weights; its jobs' targets may
    be the non-public networks of its allow-list (an entry overlapping link-local or a metadata service is a 422)."""
    await teams_store.set_team(db, team=team, settings=settings, by=admin.user)
    placer.sharing.forget()
    return (await _views(db, placer, team))[0]


@router.get("/usage", response_model=UsageReport)
async def usage(
    db: Db,
    settings: SettingsDep,
    principal: Viewer,
    since: datetime | None = None,
    until: datetime | None = None,
    by: Annotated[UsageBy, Query()] = "team",
) -> UsageReport:
    """Follower-hours, GPU-hours and their cost over [since, until) (default: the last 30 days), by team, user,
    follower class or follower. A user's report counts only their team's jobs."""
    now = utcnow()
    end = as_utc(until) if until is not None else now
    if since is not None:
        start = as_utc(since)
    elif end - datetime.min.replace(tzinfo=UTC) < timedelta(days=30):
        raise InvalidRequest(f"until ({end.isoformat()}) leaves no room for the default 30 days before it", field="until")
    else:
        start = end - timedelta(days=30)
    if start >= end:
        raise InvalidRequest(f"since ({start.isoformat()}) must be before until ({end.isoformat()})", field="since")
    if end - start > MAX_PERIOD:
        raise InvalidRequest(f"a report covers at most {MAX_PERIOD.days} days; this asks {(end - start).days}", field="since")
    return await usage_store.usage(
        db, since=start, until=end, by=by, team=principal.scope, prices=settings.prices, currency=settings.currency, now=now
    )
