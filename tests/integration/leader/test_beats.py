"""Heartbeats that change nothing are written to PerfDB at most every missing_after_s / 4 (leader.store.followers
.Beats): liveness is judged from each beat's arrival in the leader's memory, and PerfDB's write per unchanged beat was a
quarter of its core under read load (bench/leader_load.py). A beat that changes anything is written at once; a
follower removed, registered again or judged missing is written (and answered) at its next beat."""

from __future__ import annotations

import uuid

import pytest

from leader.store.followers import MISSING, Beats
from tests.integration.leader.conftest import ADMIN, Leader

pytestmark = pytest.mark.integration


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _doc(leader: Leader, follower_id: str) -> dict[str, object]:
    doc = leader.db.followers.find_one({"_id": follower_id})
    assert doc is not None
    return doc


def test_an_unchanged_beat_is_written_at_most_every_quarter_timeout_and_a_change_at_once(leader: Leader) -> None:
    clock = Clock()
    leader.client.app.state.resources.beats = Beats(clock=clock)  # (the seam: this leader's clock for its writes)
    rewrite_after_s = leader.settings.missing_after_s / 4
    follower, incarnation = f"f-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    leader.register(follower, incarnation)

    assert leader.heartbeat(follower, incarnation)
    written = _doc(leader, follower)["last_seen"]
    clock.now += rewrite_after_s - 0.001
    assert leader.heartbeat(follower, incarnation)  # known, answered from memory:
    assert _doc(leader, follower)["last_seen"] == written  # not written
    assert leader.heartbeat(follower, incarnation, state="busy")  # a change: written at once
    busy = _doc(leader, follower)
    assert busy["state"] == "busy" and busy["last_seen"] > written
    clock.now += rewrite_after_s
    assert leader.heartbeat(follower, incarnation, state="busy")  # unchanged, but a quarter timeout on: written
    assert _doc(leader, follower)["last_seen"] > busy["last_seen"]

    # Judged missing after a silence (the monitor's write): the next beat is written, and the follower is back.
    clock.now += leader.settings.missing_after_s
    leader.db.followers.update_one({"_id": follower}, {"$set": {"state": MISSING}})
    assert leader.heartbeat(follower, incarnation, state="busy")
    assert _doc(leader, follower)["state"] == "busy"

    # Removed by an admin: the very next beat is told to register again, however recent the last write.
    assert leader.client.delete(f"/api/v1/followers/{follower}", headers=ADMIN).status_code == 204
    assert not leader.heartbeat(follower, incarnation, state="busy")
    leader.register(follower, incarnation)
    assert leader.heartbeat(follower, incarnation, state="busy")
    assert _doc(leader, follower)["state"] == "busy"
