"""The search for the highest load that meets the SLO, as a plan of probes with no I/O: bracket (the floor, then the
ceiling), then narrow the bracket between the highest passing and the lowest failing load until it is within the
resolution, or the probes run out. The follower runs each probe as a full measured point (follower/point/search.py);
the unit tests and bench/search.py run the same plan on synthetic curves.

Narrowing aims at the root of the SLO margin (the criterion's signed distance from its limit, as a share of it),
interpolated over log-load by a monotone cubic (PCHIP, as vLLM's `bench sweep serve_sla` and AIPerf do) through every
load measured, kept inside the middle of the bracket so a misleading curve cannot stall it; bench/search.py measures
it against plain bisection on synthetic curves. A load whose verdict lies inside its own 95% interval is measured
again with a new seed and decided by both runs together (the caller pools them), once. So is a load whose run was
invalid (the generator could not send on time, the host stalled): an invalid run says nothing of the SLO, so the
load is decided by its valid runs, and fails as invalid only when none is valid; unless it failed by more than the
whole limit, which no measurement fault explains away.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from scipy.interpolate import PchipInterpolator
from scipy.optimize import brentq

from common.spec.load import SearchSpec
from common.wire.search import Stopped

# A margin this far inside the limit at the highest pass, with a fail one resolution step above: a cliff.
CLIFF_MARGIN = 0.5
# Interpolation never aims closer to either end of the bracket than this share of it (in log-load).
SAFEGUARD = 0.25
# An invalid run that missed the limit by more than this share of it (p99 over twice the limit) is not measured again.
HOPELESS_MARGIN = -1.0


@dataclass(frozen=True)
class Reading:
    """What a run (or a load's pooled runs) says against the criterion."""

    valid: bool
    margin: float | None  # > 0: within the limit; None: nothing to judge (an invalid run)
    uncertain: bool = False  # its 95% interval straddles the limit
    interval: tuple[float, float] | None = None  # the margin's 95% interval, where the run gives one

    @property
    def passed(self) -> bool:
        return self.valid and self.margin is not None and self.margin >= 0


# Where to probe next inside the bracket (low passes, high fails), from every load measured with its margin and the
# resolution asked.
Narrow = Callable[[list[tuple[float, float]], float, float, float], float]


def bisect(_known: list[tuple[float, float]], low: float, high: float, _precision: float) -> float:
    """The geometric middle of the bracket: the same relative step at any scale."""
    return math.sqrt(low * high)


def interpolate(known: list[tuple[float, float]], low: float, high: float, precision: float) -> float:
    """Just past the root of the margin's monotone cubic interpolant over log-load, on the side of the bracket's
    farther end (half the resolution past it, so that a right estimate closes the bracket in two probes), kept in the
    middle of the bracket; the geometric middle when the margins do not cross inside it."""
    xs = [math.log(load) for load, _ in known]
    lo, hi = math.log(low), math.log(high)
    if len(known) < 3 or lo not in xs or hi not in xs:  # two ends say nothing of the curve's shape between them
        return bisect(known, low, high, precision)
    # A fail by more than the whole limit (an overloaded p99 is unbounded) says no more than a fail by all of it.
    curve = PchipInterpolator(xs, [max(margin, -1.0) for _, margin in known])
    if not curve(lo) > 0 > curve(hi):
        return bisect(known, low, high, precision)
    root = brentq(lambda x: float(curve(x)), lo, hi)
    step = math.log(1 + precision / 2)
    aim = root - step if root - lo > hi - root else root + step
    share = min(max((aim - lo) / (hi - lo), SAFEGUARD), 1 - SAFEGUARD)
    return math.exp(lo + share * (hi - lo))


@dataclass
class Outcome:
    """How a search ended: the bracket, why it stopped, and what it noticed."""

    stopped: Stopped
    found: float | None
    lowest_fail: float | None
    width: float | None
    cliff: bool
    monotone: bool
    notes: list[str] = field(default_factory=list)
    limit_low: float | None = None  # the limit's interval with each verdict's own uncertainty (SearchPlan.limit())
    limit_high: float | None = None


class SearchPlan:
    """The probes of one search, decided one at a time from the readings recorded so far."""

    def __init__(self, spec: SearchSpec, narrow: Narrow = interpolate) -> None:
        self.spec = spec
        self.narrow = narrow
        self.users = spec.over == "concurrency"
        self.verdicts: dict[float, Reading] = {}  # the verdict at each load (a repeated load's pooled one)
        self.repeated: set[float] = set()
        self.probes = 0
        self._repeat: float | None = None
        self._sides: list[bool] = []  # each narrowing probe's verdict, in order (True: passed)

    def record(self, load: float, reading: Reading) -> None:
        """One more run at `load`: its reading, or after a repeat the pooled reading of both runs."""
        self.probes += 1
        repeat = load in self.verdicts
        if not repeat and load not in (self.spec.low, self.spec.high):
            self._sides.append(reading.passed)
        elif repeat and self._sides and load not in (self.spec.low, self.spec.high):
            self._sides[-1] = reading.passed
        self.verdicts[load] = reading
        if repeat:
            self.repeated.add(load)
            self._repeat = None
        elif reading.uncertain or (not reading.valid and (reading.margin is None or reading.margin >= HOPELESS_MARGIN)):
            self._repeat = load

    def next_load(self) -> tuple[float, bool] | None:
        """(the next load, whether it repeats an uncertain one), or None when the search is over."""
        if self.probes >= self.spec.max_steps:
            return None
        if self._repeat is not None:
            return self._repeat, True
        low, high = self.spec.low, self.spec.high
        if low not in self.verdicts:
            return low, False
        if not self.verdicts[low].passed:
            return None
        if high not in self.verdicts:
            return high, False
        if self.verdicts[high].passed:
            return None
        found, fail = self._bracket()
        assert found is not None and fail is not None
        if self._resolved(found, fail):
            return None
        known = sorted((load, r.margin) for load, r in self.verdicts.items() if r.margin is not None)
        # Two narrowing probes on the same side in a row: the interpolant is misleading here (a cliff, a kink), so
        # halve the bracket (Illinois' rule against regula falsi's one-sided stall).
        narrow = bisect if len(self._sides) >= 2 and self._sides[-1] == self._sides[-2] else self.narrow
        load = narrow(known, found, fail, self.spec.precision)
        if self.users:
            return float(min(max(round(load), found + 1), fail - 1)), False
        # A rate a user reads: 3 significant digits where that stays inside the bracket (0.5% at most, well inside
        # any resolution asked), more where it would not.
        for digits in (3, 4, 6):
            if found < (rounded := float(f"{load:.{digits}g}")) < fail:
                return rounded, False
        return load, False

    def _bracket(self) -> tuple[float | None, float | None]:
        """(the highest passing load below the lowest failing one, that failing load)."""
        fails = [load for load, r in self.verdicts.items() if not r.passed]
        fail = min(fails) if fails else None
        passes = [load for load, r in self.verdicts.items() if r.passed and (fail is None or load < fail)]
        return (max(passes) if passes else None), fail

    def _resolved(self, found: float, fail: float) -> bool:
        return (fail - found) / fail <= self.spec.precision or (self.users and fail - found <= 1)

    def outcome(self) -> Outcome:
        """The answer as it stands: call once next_load() says the search is over."""
        found, fail = self._bracket()
        low, high = self.spec.low, self.spec.high
        width = (fail - found) / fail if found is not None and fail is not None else None
        stopped: Stopped
        if low in self.verdicts and not self.verdicts[low].passed:
            stopped = "floor_fails"
        elif high in self.verdicts and self.verdicts[high].passed:
            stopped = "ceiling_not_reached"
        elif found is not None and fail is not None and self._resolved(found, fail):
            stopped = "resolved"
        else:
            stopped = "out_of_probes"
        unit = "users" if self.users else "req/s"
        notes: list[str] = []
        above = sorted(load for load, r in self.verdicts.items() if r.passed and fail is not None and load > fail)
        if above:
            assert fail is not None
            notes.append(
                f"not monotone: {', '.join(f'{x:g}' for x in above)} {unit} passed above a fail at {fail:g} {unit} "
                "(a cliff, or noise); the answer is the highest pass below the lowest fail"
            )
        better = self._better_above()
        if better:
            lower, upper = better
            notes.append(
                f"not monotone: the criterion is clearly better at {upper:g} {unit} than at {lower:g} {unit} (their 95% "
                "intervals do not overlap): the server does better under more load there (batching), so the curve "
                "may pass again above the answer"
            )
        if fail is not None and not self.verdicts[fail].valid:
            notes.append(
                f"the lowest failing load, {fail:g} {unit}, failed as an invalid measurement, not by the SLO (its "
                "reasons are on its probe): the answer is the most this run could measure within the SLO, which may "
                "be below what the server itself carries"
            )
        cliff = False
        if stopped == "resolved" and found is not None and fail is not None and self.verdicts[fail].valid:
            top, bottom = self.verdicts[found].margin, self.verdicts[fail].margin
            if top is not None and bottom is not None and top >= CLIFF_MARGIN and bottom < 0:
                cliff = True
                notes.append(
                    f"a cliff: met with {100 * top:.0f}% to spare at {found:g} {unit}, missed by {-100 * bottom:.0f}% at "
                    f"{fail:g} {unit}, within one resolution step"
                )
        if stopped == "out_of_probes" and found is not None:
            where = f"[{found:g}, {fail:g}] {unit}" if fail is not None else f"at least {found:g} {unit}"
            notes.append(
                f"stopped short after {self.probes} probes (max_steps): the limit lies in {where}"
                + (f", {100 * width:.0f}% wide, wider than the asked {100 * self.spec.precision:g}%" if width else "")
            )
        for load in (found, fail):
            if load is not None and load in self.repeated and self.verdicts[load].uncertain:
                notes.append(f"the verdict at {load:g} {unit} is uncertain: both runs together still straddle the limit")
        limit_low, limit_high = self.limit()
        return Outcome(stopped, found, fail, width, cliff, not (above or better), notes, limit_low, limit_high)

    def limit(self) -> tuple[float | None, float | None]:
        """Where the limit lies with each verdict's own sampling uncertainty, not only between the bracket's ends: the
        highest load that passed surely (its margin's 95% interval wholly inside the limit) below the lowest that failed
        surely (wholly outside; an invalid run fails nothing surely). A verdict without an interval is sure unless it
        is uncertain or pooled from a repeat. None: no such load (the limit may lie below the floor, or above the
        ceiling)."""

        def sure(load: float, reading: Reading) -> bool:
            if reading.interval is not None:
                return reading.interval[0] > 0 if reading.passed else reading.interval[1] < 0
            # Pooled runs carry no interval: a load measured again because its first run was uncertain stays unsure.
            return not reading.uncertain and load not in self.repeated

        fails = [load for load, r in self.verdicts.items() if r.valid and not r.passed and sure(load, r)]
        high = min(fails) if fails else None
        passes = [load for load, r in self.verdicts.items() if r.passed and sure(load, r) and (high is None or load < high)]
        return (max(passes) if passes else None), high

    def _better_above(self) -> tuple[float, float] | None:
        """(a load, a higher one) whose margins' intervals say the higher load does clearly better, if any."""
        known = sorted((load, r.interval) for load, r in self.verdicts.items() if r.interval is not None)
        for i, (lower, (_, top)) in enumerate(known):
            for upper, (bottom, _) in known[i + 1 :]:
                if bottom > top:
                    return lower, upper
        return None
