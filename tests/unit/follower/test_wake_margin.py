"""The open loop's wake margin (follower/loadgen/timing.py): how far ahead of each send the timerfd wakes the dispatcher.
Adaptive by default (the 90th percentile of each 64 wake-ups' lateness, within its bounds), fixed for the busy tail."""

from __future__ import annotations

from follower.loadgen.timing import BUSY_TAIL_NS, MARGIN_MAX_NS, MARGIN_MIN_NS, MARGIN_WINDOW, WakeMargin, margin_for


def test_the_margin_follows_the_lateness_of_the_last_wake_ups_within_its_bounds() -> None:
    margin = WakeMargin()
    assert margin.ns == MARGIN_MAX_NS  # until a window of wake-ups was seen
    lateness = [1_000 * ((k * 37) % 64) for k in range(MARGIN_WINDOW)]  # 0..63 µs, shuffled
    for late in lateness[:-1]:
        margin.observe(late)
    assert margin.ns == MARGIN_MAX_NS
    margin.observe(lateness[-1])
    assert margin.ns == 57_000  # the 58th of 64 in order: 90% of the wake-ups were no later
    for _ in range(MARGIN_WINDOW):  # prompt wake-ups: the floor
        margin.observe(3_000)
    assert margin.ns == MARGIN_MIN_NS
    for _ in range(MARGIN_WINDOW):  # a host waking 1 ms late: the margin stops at its ceiling, the rest is send lag
        margin.observe(1_000_000)
    assert margin.ns == MARGIN_MAX_NS


def test_the_busy_tail_is_fixed_whatever_the_wake_ups_do() -> None:
    busy, usual = margin_for("busy"), margin_for("yield")
    for _ in range(2 * MARGIN_WINDOW):
        busy.observe(2_000)
        usual.observe(2_000)
    assert (busy.ns, usual.ns) == (BUSY_TAIL_NS, MARGIN_MIN_NS)
