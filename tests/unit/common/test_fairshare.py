"""The fair-share rule (common/fairshare.py): a team's distance from its weighted share among the teams contending, the
order it gives waiting jobs (class, then teams within their shares, then overdue first come first served, then
shortest first), and the use of follower time within the sliding window."""

from __future__ import annotations

import pytest

from common.fairshare import TeamUse, distance, order_key, standing, use_in_window


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
    assert standing("a", uses) == 2 and standing("b", uses) == 0
    # Weighted 3:1, the same use is a's fair share exactly.
    weighted = {**uses, "a": TeamUse(3.0, 300.0, True)}
    assert distance("a", weighted) == pytest.approx(0.0) and standing("a", weighted) == 0
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


def test_a_job_that_would_take_its_team_past_its_share_waits_behind_those_that_would_not() -> None:
    # b, weighted 1 against a's 2, used 34 of 100 follower-minutes: a third (1.05 x) is 35, so it is within its share.
    uses = {"a": TeamUse(2.0, 66.0, True, running=2), "b": TeamUse(1.0, 34.0, True, running=0)}
    assert standing("b", uses, fleet=4, extra_s=1.0) == 0
    # A 30-minute job charged takes b to 64/130 = 49% of the use: it stands behind a's jobs within a's share, but
    # before those of a team already past its share.
    assert standing("b", uses, fleet=4, extra_s=30.0) == 1 and standing("a", uses, fleet=4, extra_s=1.0) == 0
    assert key(1.0, "a", uses) < key(30.0, "b", uses)
    over = {**uses, "a": TeamUse(2.0, 90.0, True, running=2)}
    assert standing("a", over, fleet=4, extra_s=1.0) == 2 and key(30.0, "b", over) < key(1.0, "a", over)
    # b's share of 4 followers is 1.33: rounded up, 2. Running on 2, a third is past it; not counting followers, not.
    on_two = {**uses, "b": TeamUse(1.0, 34.0, True, running=2)}
    assert standing("b", on_two, fleet=4, extra_s=1.0) == 2 and standing("b", on_two, fleet=0, extra_s=1.0) == 0
    # Alone it is never past its share, however many followers it runs on: idle capacity is never withheld.
    assert standing("b", {"b": TeamUse(1.0, 34.0, True, running=4)}, fleet=4, extra_s=30.0) == 0
