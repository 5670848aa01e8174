"""The heartbeat thread's beat is one POST: nothing slow rides in front of it."""

from __future__ import annotations

import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

from common.wire.followers import FollowerInfo
from follower.agent.heartbeat import CLOCK_EVERY, Heartbeater
from follower.agent.runloop import RunLoop
from follower.link.leader_client import LeaderClient
from follower.settings import FollowerSettings


class _SlowClock:
    """A leader whose clock round trips hang until `release` (a busy leader: each one up to the client's timeout)."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.asked = threading.Event()

    def clock_offset(self, samples: int) -> tuple[int, int]:
        self.asked.set()
        assert self.release.wait(10)
        return 2_000_000, 50_000


def test_a_beat_never_waits_for_the_clock_offset_and_the_offset_rides_on_the_next_beat(tmp_path: Path) -> None:
    leader = _SlowClock()
    loop = SimpleNamespace(running_job=lambda: None, holding=SimpleNamespace(snapshot=list), waiting_reason=None)
    info = cast(FollowerInfo, SimpleNamespace(incarnation="i1"))
    settings = FollowerSettings(token="x" * 16, follower_id="f1", work_dir=tmp_path)
    heart = Heartbeater(settings, cast(LeaderClient, leader), info, cast(RunLoop, loop))
    beats = [heart.beat() for _ in range(CLOCK_EVERY)]  # the tenth starts the measurement and is sent at once
    assert leader.asked.wait(5)
    assert [b.clock for b in beats] == [None] * CLOCK_EVERY
    assert heart.beat().clock is None  # still measuring: the beat goes without it
    leader.release.set()
    measuring = cast(Any, heart)._measuring
    measuring.join(5)
    carried = heart.beat().clock
    assert carried is not None and (carried.offset_ms, carried.uncertainty_ms) == (2.0, 0.05)
    assert heart.beat().clock is None  # sent once
