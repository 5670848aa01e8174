"""The search's plan on synthetic curves of known knee: it finds the knee within its resolution in at most 10 probes
(rate and concurrency, smooth and cliff), and says when it stopped short, when the ceiling was not reached, when the
floor fails, when the curve is not monotone, and repeats an uncertain load once."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from common.spec.load import SearchSpec
from follower.point.searchplan import Narrow, Reading, SearchPlan, bisect, interpolate

Curve = Callable[[float], float]  # load -> margin (> 0 passes)


def queue(knee: float) -> Curve:
    """A queue's p99 against an SLO: p99 = base / (1 - load / capacity), 5x the base at the knee."""
    capacity = knee / 0.8
    return lambda x: 1 - (0.2 / (1 - x / capacity)) if x < capacity else -10.0


def power(knee: float) -> Curve:
    return lambda x: 1 - (x / knee) ** 2


def cliff(knee: float) -> Curve:
    return lambda x: 0.8 if x <= knee else -4.0


def drive(spec: SearchSpec, curve: Curve, narrow: Narrow = interpolate, spread: float = 0.0) -> SearchPlan:
    plan = SearchPlan(spec, narrow)
    while (step := plan.next_load()) is not None:
        load, _ = step
        margin = curve(load)
        plan.record(load, Reading(valid=True, margin=margin, interval=(margin - spread, margin + spread) if spread else None))
    return plan


RATE = SearchSpec(low=10, high=1000)


@pytest.mark.parametrize("narrow", [interpolate, bisect], ids=["interpolate", "bisect"])
@pytest.mark.parametrize("shape", [queue, power, cliff])
@pytest.mark.parametrize("share", [0.02, 0.2, 0.9])
def test_the_answer_lies_within_the_resolution_of_the_knee(share: float, shape: Callable[[float], Curve], narrow: Narrow) -> None:
    knee = RATE.low + share * (RATE.high - RATE.low) + 0.37  # not a round number a probe could land on
    plan = drive(RATE, shape(knee), narrow)
    out = plan.outcome()
    assert out.stopped == "resolved" and plan.probes <= 10
    assert out.found is not None and out.lowest_fail is not None
    assert out.found <= knee < out.lowest_fail
    assert (out.lowest_fail - out.found) / out.lowest_fail <= RATE.precision
    assert (knee - out.found) / knee <= RATE.precision
    assert out.cliff == (shape is cliff) and out.monotone
    assert any("a cliff" in n for n in out.notes) == (shape is cliff)


@pytest.mark.parametrize("shape", [queue, power, cliff])
@pytest.mark.parametrize("share", [0.02, 0.2, 0.9])
def test_a_search_over_users_finds_the_knee_in_whole_users(share: float, shape: Callable[[float], Curve]) -> None:
    spec = SearchSpec(over="concurrency")
    assert (spec.low, spec.high) == (1, 256)
    knee = 1 + share * 255 + 0.5  # between two whole numbers of users
    plan = drive(spec, shape(knee))
    out = plan.outcome()
    assert out.stopped == "resolved" and plan.probes <= 10
    assert all(load == int(load) for load in plan.verdicts)
    assert out.found is not None and out.lowest_fail is not None and out.found <= knee < out.lowest_fail
    assert out.lowest_fail - out.found <= 1 or (out.lowest_fail - out.found) / out.lowest_fail <= spec.precision


def test_out_of_probes_is_said_with_the_interval_reached() -> None:
    spec = SearchSpec(low=10, high=1000, max_steps=4)
    out = drive(spec, power(200)).outcome()
    assert out.stopped == "out_of_probes"
    assert out.found is not None and out.lowest_fail is not None and out.found <= 200 < out.lowest_fail
    assert out.width is not None and out.width > spec.precision
    assert any(n.startswith("stopped short after 4 probes") for n in out.notes)


def test_ceiling_not_reached_and_floor_fails_stop_at_once() -> None:
    plan = drive(RATE, power(5000))
    out = plan.outcome()
    assert (out.stopped, out.found, out.lowest_fail, plan.probes) == ("ceiling_not_reached", 1000, None, 2)
    plan = drive(RATE, power(5))
    out = plan.outcome()
    assert (out.stopped, out.found, out.lowest_fail, plan.probes) == ("floor_fails", None, 10, 1)


def test_a_curve_that_does_better_under_more_load_is_called_not_monotone() -> None:
    # Batching: the margin rises from 0.3 to 0.7 past 100 req/s, then falls to the knee at 500.
    def batching(x: float) -> float:
        return 0.3 if x < 100 else 0.7 * (1 - ((x - 100) / 400) ** 2) if x < 500 else -1.0

    out = drive(RATE, batching, spread=0.05).outcome()
    assert not out.monotone and any(n.startswith("not monotone: the criterion is clearly better at") for n in out.notes)
    assert drive(RATE, power(300), spread=0.05).outcome().monotone


def test_an_uncertain_load_is_measured_once_more_and_decided_by_both_runs() -> None:
    plan = SearchPlan(RATE)
    assert plan.next_load() == (10, False)
    plan.record(10, Reading(valid=True, margin=0.01, uncertain=True))
    assert plan.next_load() == (10, True)  # the same load again, a repeat
    plan.record(10, Reading(valid=True, margin=-0.02, uncertain=True))  # both runs together: a narrow fail
    assert plan.next_load() is None
    out = plan.outcome()
    assert out.stopped == "floor_fails" and plan.probes == 2
    # An uncertain repeat is not repeated again; an invalid run never passes whatever its margin: it is measured once
    # more, and a load whose runs are all invalid fails.
    plan = SearchPlan(RATE)
    plan.record(10, Reading(valid=False, margin=0.9))
    assert plan.next_load() == (10, True)
    plan.record(10, Reading(valid=False, margin=0.9))
    assert plan.next_load() is None and plan.outcome().stopped == "floor_fails" and plan.probes == 2


def test_an_invalid_run_is_measured_again_and_a_valid_repeat_decides() -> None:
    """A stall on a busy host made the floor's first run invalid (the generator sent late): its repeat, valid and well
    within the limit, decides the load (the caller pools only valid runs), and the search goes on."""
    plan = SearchPlan(RATE)
    plan.record(10, Reading(valid=False, margin=-0.06))
    assert plan.next_load() == (10, True)
    plan.record(10, Reading(valid=True, margin=0.79))
    assert plan.next_load() == (1000, False)
    # A run that failed by more than the whole limit is not measured again, invalid or not: overload, whatever the cause.
    plan.record(1000, Reading(valid=False, margin=-5.2))
    step = plan.next_load()
    assert step is not None and step[1] is False and 10 < step[0] < 1000


def test_an_uncertain_boundary_after_its_repeat_is_noted() -> None:
    plan = SearchPlan(SearchSpec(low=10, high=20, precision=0.6))
    plan.record(10, Reading(valid=True, margin=0.01, uncertain=True))
    assert plan.next_load() == (10, True)
    plan.record(10, Reading(valid=True, margin=0.01, uncertain=True))
    assert plan.next_load() == (20, False)
    plan.record(20, Reading(valid=True, margin=-0.5))
    assert plan.next_load() is None
    out = plan.outcome()
    assert out.stopped == "resolved" and any("the verdict at 10 req/s is uncertain" in n for n in out.notes)


def test_interpolation_needs_fewer_probes_than_bisection_on_smooth_curves() -> None:
    """The measured reason interpolation is the default (bench/search.py measures it with noise too)."""
    count = {narrow: 0 for narrow in (interpolate, bisect)}
    for narrow in count:
        for share in (0.02, 0.1, 0.2, 0.5, 0.9):
            for shape in (queue, power):
                count[narrow] += drive(RATE, shape(10 + share * 990), narrow).probes
    assert count[interpolate] < count[bisect]


def test_an_invalid_fail_is_named_as_such_and_is_never_a_cliff() -> None:
    """A load the run could not measure validly (the generator's send lag) fails whatever its margin: the answer
    says the limit is the measurement's, and a comfortable pass below it is no cliff."""
    plan = SearchPlan(SearchSpec(low=10, high=160, precision=0.1))
    while (step := plan.next_load()) is not None:
        load, _ = step
        plan.record(load, Reading(valid=load < 38, margin=1.0))
    out = plan.outcome()
    assert out.stopped == "resolved" and not out.cliff and out.found is not None and out.found < 38 <= (out.lowest_fail or 0)
    assert any("failed as an invalid measurement, not by the SLO" in n for n in out.notes)
