"""The fair-share rule (common/fairshare.py): a team's distance from its weighted share among the teams contending, the
order it gives waiting jobs (class, then teams within their shares, then overdue first come first served, then
shortest first), and the use of follower time within the sliding window."""

from __future__ import annotations

import pytest

from common.fairshare import TeamUse, distance, order_key, over_share, use_in_window


def key(estimate: float, team: str, uses: dict[str, TeamUse], *, priority: str = "normal", waited: float = 0.0) -> tuple:
    return order_key(
        estimate_s=estimate,
        waited_s=waited,
        ahead_s=100.0,
        priority=priority,
        team=team,
        uses=uses,
        ageing_per_s=0.0,
        wait_bound=1.0,
    )


def test_distance_is_use_over_weighted_share_among_the_teams_contending() -> None:
    uses = {"a": TeamUse(1.0, 300.0, True), "b": TeamUse(1.0, 100.0, True), "idle": TeamUse(5.0, 0.0, False)}
    # a used 3/4 of what the contending teams used, its share is 1/2 (the idle team's weight does not count).
    assert distance("a", uses) == pytest.approx(0.5) and distance("b", uses) == pytest.approx(-0.5)
    assert over_share("a", uses) and not over_share("b", uses)
    # Weighted 3:1, the same use is a's fair share exactly.
    weighted = {**uses, "a": TeamUse(3.0, 300.0, True)}
    assert distance("a", weighted) == pytest.approx(0.0) and not over_share("a", weighted)
    # Alone, or before anyone used anything, no team is over.
    assert distance("a", {"a": TeamUse(1.0, 300.0, True)}) == 0.0
    assert distance("a", {"a": TeamUse(1.0, 0.0, True), "b": TeamUse(1.0, 0.0, True)}) == 0.0


def test_the_order_is_class_then_share_then_overdue_then_shortest() -> None:
    uses = {"a": TeamUse(1.0, 300.0, True), "b": TeamUse(1.0, 100.0, True)}
    # Within its share, b's long job goes before a's short one; an urgent job of a's before either.
    assert key(50.0, "b", uses) < key(1.0, "a", uses)
    assert key(1.0, "a", uses, priority="urgent") < key(50.0, "b", uses) < key(1.0, "b", uses, priority="batch")
    # Among jobs of teams within their shares: an overdue one (waited its FCFS turnaround) first, else shortest first.
    assert key(50.0, "b", uses, waited=150.0) < key(1.0, "b", uses)
    assert key(5.0, "b", uses) < key(50.0, "b", uses)
    # Without teams' uses (the follower's own order), only class, overdue and size count.
    assert order_key(estimate_s=1.0, waited_s=0, ahead_s=0, priority="normal", ageing_per_s=0, wait_bound=1.0)[1] == 0


def test_use_in_the_window_cuts_runs_at_its_edges_and_counts_running_ones_to_now() -> None:
    runs = [("a", 0.0, 50.0), ("a", 90.0, 120.0), ("b", 100.0, None), ("c", 0.0, 10.0)]
    used = use_in_window(runs, now=130.0, window_s=100.0)
    assert used == {"a": pytest.approx(20.0 + 30.0), "b": pytest.approx(30.0)}  # c ended before the window
