"""Sharing the fleet between teams: priority classes, each team's weight and its use of follower time over a sliding
window, and the order waiting jobs run in that follows from them. One home for the rule: the leader's queue orders
by it when followers hold jobs back (leader/placement/placer.py, `placement_lookahead`), the follower's holding
queue by its class and size part (follower/agent/holding.py), and the scheduler bench simulates both
(bench/scheduler_teams.py).

The rule. Among teams with work waiting or running (the contending ones), a team's fair share is its weight over
theirs; its use is its share of the follower seconds they used in the window (running jobs up to now). Waiting jobs
run in this order: by priority class (urgent, normal, batch: a class waits only for the ones above it); then by where
the job stands against its team's share (1 + TOLERANCE times it): the jobs of teams within their shares first, even
with the job's own estimate charged to its team's use; then those that the charge would take past it; last those of
teams past it already, in their use of the window or in followers (one more would run the team on more than its
share of the fleet's followers, rounded up). (Without the charge a long job started while its team was just under
overshoots for its whole run; without the count of followers a team under its share takes every follower that frees
before its use catches up: bench/scheduler.py, part 1c.) Then, among jobs that stand alike, a job
overdue (waited `wait_bound` times its first-come-first-served turnaround) first come first served, the others
shortest estimate first with ageing. So shortest-first decides within and across teams as far as the shares allow,
no team's job waits without bound while its team is within its share, and nothing is held back: the order only
ranks what waits, so a team alone gets the whole fleet. bench/scheduler.py measures the shares it gives under
contention, and what it costs in mean completion time and the longest wait.
"""

from __future__ import annotations

import math
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
    running: int = 0  # followers running its jobs now


class Shares:
    """The standings of many jobs against one `uses` (a view of the whole queue orders thousands of jobs): the
    contending teams' weights and use summed once, not per job. `distance` and `standing` are defined here."""

    def __init__(self, uses: Mapping[str, TeamUse], tolerance: float = TOLERANCE, fleet: int = 0) -> None:
        self.uses, self.tolerance, self.fleet = uses, tolerance, fleet
        self._contending = self._sums(None)
        self._standings: dict[tuple[str, float], int] = {}  # (team, extra_s) → standing: a queue has few distinct pairs

    def _sums(self, team: str | None) -> tuple[dict[str, TeamUse], float, float]:
        """The contending teams (and `team`), their weights and their use, summed."""
        active = {name: use for name, use in self.uses.items() if use.active or name == team}
        return active, sum(max(u.weight, 0.0) for u in active.values()), sum(max(u.used_s, 0.0) for u in active.values())

    def _of(self, team: str) -> tuple[dict[str, TeamUse], float, float]:
        mine = self.uses.get(team)
        return self._contending if mine is not None and mine.active else self._sums(team)

    def distance(self, team: str, extra_s: float = 0.0) -> float:
        """How far the team is from its fair share among the contending teams: use / share - 1 (0 at its share, -1
        using none of it), with `extra_s` more of it charged to the team; 0 when it alone contends, when nobody used
        anything yet, or when it is unknown."""
        active, weights, used = self._of(team)
        if team not in active or len(active) < 2:
            return 0.0
        used += extra_s
        mine = active[team]
        if weights <= 0 or used <= 0 or mine.weight <= 0:
            return 0.0
        return ((max(mine.used_s, 0.0) + extra_s) / used) / (mine.weight / weights) - 1.0

    def standing(self, team: str, extra_s: float = 0.0) -> int:
        """Where a job of the team, `extra_s` long, stands against its team's share (smaller goes first): 2 when the
        team already uses more than (1 + tolerance) x its fair share of the window's follower time, or the job would run
        it on more of the `fleet`'s followers (0: not counted) than (1 + tolerance) x its fair share of them, rounded
        up; 1 when neither, but the team would be past its share of the window with the job charged; else 0."""
        known = self._standings.get((team, extra_s))
        if known is None:
            known = self._standings[(team, extra_s)] = self._standing(team, extra_s)
        return known

    def _standing(self, team: str, extra_s: float) -> int:
        if self.distance(team) > self.tolerance:
            return 2
        active, weights, _ = self._of(team)
        if self.fleet > 0 and len(active) >= 2 and team in active and weights > 0:
            fair = active[team].weight / weights * self.fleet
            if active[team].running + 1 > math.ceil(fair * (1 + self.tolerance)):
                return 2
        return int(self.distance(team, extra_s) > self.tolerance)


def standing(team: str, uses: Mapping[str, TeamUse], tolerance: float = TOLERANCE, fleet: int = 0, extra_s: float = 0.0) -> int:
    """Shares.standing for one job."""
    return Shares(uses, tolerance, fleet).standing(team, extra_s)


def distance(team: str, uses: Mapping[str, TeamUse], extra_s: float = 0.0) -> float:
    """Shares.distance for one team."""
    return Shares(uses).distance(team, extra_s)


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
    uses: Mapping[str, TeamUse] | Shares | None = None,
    ageing_per_s: float,
    wait_bound: float,
    tolerance: float = TOLERANCE,
    fleet: int = 0,
) -> tuple[int, int, int, float]:
    """Smaller runs first: (its class's rank; where it stands against its team's share (`standing`: its estimate
    charged, `fleet` followers; `uses` may be Shares made with them, for many jobs); then 0 and -waited for an overdue
    job, one that waited `wait_bound` x its FCFS turnaround (`ahead_s` of work before it plus its own estimate), first
    come first served among them; else 1 and its estimate less `ageing_per_s` for every second waited)."""
    rank = PRIORITY_RANK.get(priority, PRIORITY_RANK["normal"])
    over = 0
    if team and uses:
        shares = uses if isinstance(uses, Shares) else Shares(uses, tolerance, fleet)
        over = shares.standing(team, estimate_s)
    if wait_bound > 0 and waited_s >= wait_bound * (ahead_s + estimate_s):
        return (rank, over, 0, -waited_s)
    return (rank, over, 1, estimate_s - ageing_per_s * waited_s)
