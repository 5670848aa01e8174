"""What a test may ask of a point's verdict when the host's own load can change it.

On a busy 2-core machine a stall of the test's own processes fills the in-flight cap, delays sends, or slows a stand-in
server, and the point is rightly called invalid for it. A test of something else (a protocol, a key, a signature) asks
only that no other rule was broken: no errors, nothing unanswered or dropped, enough requests.
"""

from __future__ import annotations

from common.wire.results import PointResult
from follower.loadgen.verdict import RATE_TOLERANCE

HOST_LOAD = frozenset({"cap_reached", "send_lag", "rate_missed", "server_saturated", "generator_saturated"})


def unexplained(point: PointResult) -> list[str]:
    """The point's invalid reasons that the host's load does not explain (empty: valid, or invalid only by load)."""
    return [r.text for r in point.reasons if r.code not in HOST_LOAD]


def assert_verdict_follows_figures(point: PointResult) -> None:
    """The point's verdict is the judge's rules (follower/loadgen/verdict.py) applied to its own figures, whatever the
    host did: valid exactly when it has no reason; a rate miss exactly when the achieved rate is more than
    RATE_TOLERANCE off the offered one and no saturated server is named instead; a reached cap only with requests that
    found every slot busy."""
    codes = {reason.code for reason in point.reasons}
    assert point.valid == (not point.invalid_reasons) == (not codes), point.reasons
    missed = abs(point.achieved_rate - point.offered_rate) / point.offered_rate > RATE_TOLERANCE
    assert ("rate_missed" in codes) == (missed and "server_saturated" not in codes), point
    assert "cap_reached" not in codes or point.capped > 0, point
