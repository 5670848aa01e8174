"""What a test may ask of a point's verdict when the host's own load can change it.

On a busy 2-core machine a stall of the test's own processes fills the in-flight cap, delays sends, or slows a stand-in
server, and the point is rightly called invalid for it. A test of something else (a protocol, a key, a signature) asks
only that no other rule was broken: no errors, nothing unanswered or dropped, enough requests.
"""

from __future__ import annotations

from common.wire.results import PointResult

HOST_LOAD = frozenset({"cap_reached", "send_lag", "rate_missed", "server_saturated", "generator_saturated"})


def unexplained(point: PointResult) -> list[str]:
    """The point's invalid reasons that the host's load does not explain (empty: valid, or invalid only by load)."""
    return [r.text for r in point.reasons if r.code not in HOST_LOAD]
