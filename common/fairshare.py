"""Sharing the fleet between teams: priority classes, each team's weight and its use of follower time over a sliding
window, and the order waiting jobs run in that follows from them. One home for the rule: the leader's queue orders
by it when followers hold jobs back (leader/placement/placer.py, `placement_lookahead`), the follower's holding
queue by its class and size part (follower/agent/holding.py), and the scheduler bench simulates both
(bench/scheduler_teams.py).

The rule. Among teams with work waiting or running (the contending ones), a team's fair share is its weight over
theirs; its use is its share of the follower seconds they used in the window (running jobs up to now). Waiting jobs
run in this order: by priority class (urgent, normal, batch: a class waits only for the ones above it); then the
jobs of teams within (1 + TOLERANCE) x their fair share before those of teams over it; then, among those, a job
overdue (waited `wait_bound` times its first-come-first-served turnaround) first come first served, the others
shortest estimate first with ageing. So shortest-first decides within and across teams as far as the shares allow,
no team's job waits without bound while its team is within its share, and nothing is held back: the order only
ranks what waits, so a team alone gets the whole fleet. bench/scheduler.py measures the shares it gives under
contention, and what it costs in mean completion time and the longest wait.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal, get_args

Priority = Literal["urgent", "normal", "batch"]
PRIORITIES: tuple[str, ...] = get_args(Priority)
# The order classes run in: every waiting urgent job before any normal one, batch only when neither waits.
PRIORITY_RANK: dict[str, int] = {name: rank for rank, name in enumerate(PRIORITIES)}
# Who may ask for a class: urgent pushes every other team's work back, so only admins may.
PRIORITY_ROLES: dict[str, tuple[str, ...]] = {
    "urgent": ("admin",),
    "normal": ("submitter", "admin"),
    "batch": ("submitter", "admin"),
}

# A job that has waited as long as its FCFS turnaround (it would have finished under FCFS) runs before any job not so
# overdue; bench/scheduler.py measured 1.0 against round-robin + FCFS.
WAIT_BOUND = 1.0
# Seconds of estimate forgiven per second waited (a job waiting estimate/ageing seconds runs next).
AGEING_PER_S = 0.01
DEFAULT_WEIGHT = 1.0
# The sliding window a team's use is measured over (seconds): long beside a benchmark job, so that a team whose long
# jobs all started while it was under its share does not stay ahead for long (bench/scheduler.py: a long-job team
# weighted 1 against a short-job team's 2, due a third of a contended fleet, took 45% with a 1 h window, 38% with 4 h).
WINDOW_S = 4 * 3600.0
# A team using more than (1 + TOLERANCE) x its fair share waits behind the teams that do not.
TOLERANCE = 0.05


@dataclass(frozen=True)
class TeamUse:
    """A team's standing in the fleet: its weight, the follower seconds it used in the window, whether it contends."""

    weight: float = DEFAULT_WEIGHT
    used_s: float = 0.0
    active: bool = False  # it has work waiting or running somewhere in the fleet


def over_share(team: str, uses: Mapping[str, TeamUse], tolerance: float = TOLERANCE) -> bool:
    """Whether the team's next job waits behind those of teams within their shares: its use of the window's follower
    time is more than (1 + tolerance) x its fair share."""
    return distance(team, uses) > tolerance


def distance(team: str, uses: Mapping[str, TeamUse]) -> float:
    """How far the team is from its fair share among the contending teams: use / share - 1 (0 at its share, -1 using
    none of it); 0 when it alone contends, when nobody used anything yet, or when it is unknown."""
    active = {name: use for name, use in uses.items() if use.active or name == team}
    if team not in active or len(active) < 2:
        return 0.0
    weights = sum(max(u.weight, 0.0) for u in active.values())
    used = sum(max(u.used_s, 0.0) for u in active.values())
    mine = active[team]
    if weights <= 0 or used <= 0 or mine.weight <= 0:
        return 0.0
    return (max(mine.used_s, 0.0) / used) / (mine.weight / weights) - 1.0


def use_in_window(runs: Iterable[tuple[str, float, float | None]], now: float, window_s: float = WINDOW_S) -> dict[str, float]:
    """Each team's follower seconds inside [now - window, now], from its runs (team, start, end; None while running)."""
    since = now - window_s
    out: dict[str, float] = {}
    for team, began, ended in runs:
        stop = now if ended is None else min(ended, now)
        if stop > since:
            out[team] = out.get(team, 0.0) + max(0.0, stop - max(began, since))
    return out


def order_key(
    *,
    estimate_s: float,
    waited_s: float,
    ahead_s: float,
    priority: str,
    team: str = "",
    uses: Mapping[str, TeamUse] | None = None,
    ageing_per_s: float,
    wait_bound: float,
    tolerance: float = TOLERANCE,
) -> tuple[int, int, int, float]:
    """Smaller runs first: (its class's rank; 1 if its team uses more than (1 + tolerance) x its fair share, else 0;
    then 0 and -waited for an overdue job, one that waited `wait_bound` x its FCFS turnaround (`ahead_s` of work before
    it plus its own estimate), first come first served among them; else 1 and its estimate less `ageing_per_s` for
    every second waited)."""
    rank = PRIORITY_RANK.get(priority, PRIORITY_RANK["normal"])
    over = int(bool(team and uses) and over_share(team, uses or {}, tolerance))
    if wait_bound > 0 and waited_s >= wait_bound * (ahead_s + estimate_s):
        return (rank, over, 0, -waited_s)
    return (rank, over, 1, estimate_s - ageing_per_s * waited_s)
