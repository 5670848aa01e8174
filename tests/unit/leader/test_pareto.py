"""The Pareto front of what configurations served against what their users waited: no point on it is beaten on both."""

from __future__ import annotations

from leader.web.curves import pareto


def test_the_front_keeps_only_points_no_other_beats_on_both_counts() -> None:
    points = [(100.0, 5.0), (200.0, 8.0), (150.0, 9.0), (300.0, 30.0), (250.0, 40.0), (50.0, 6.0), (300.0, 25.0)]
    front = pareto(points)
    assert front == [(100.0, 5.0), (200.0, 8.0), (300.0, 25.0)]
    for x, y in points:  # everything off the front is beaten on both counts by a point on it
        if (x, y) not in front:
            assert any(fx >= x and fy <= y for fx, fy in front)
    assert pareto([]) == []
