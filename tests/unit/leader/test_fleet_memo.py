"""The fleet a submission is judged on (Placer.fleet): read from PerfDB at most every FLEET_TTL_S, at once after this
leader registered, approved or resumed a follower (Placer.fleet_changed). Once read on every submission (every
follower's document), it was PerfDB's largest cost in bench/leader_load.py's storm."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from leader.domain import Candidate
from leader.placement import placer as placer_module
from leader.placement.placer import FLEET_TTL_S, Placer


def test_the_fleet_is_read_at_most_once_a_ttl_and_at_once_after_a_change(monkeypatch: pytest.MonkeyPatch) -> None:
    now, reads = [0.0], []

    async def candidates(db: Any) -> list[Candidate]:  # the store's read, counted (the seam: PerfDB)
        reads.append(now[0])
        return [Candidate(f"f{len(reads)}", frozenset({"onnxruntime"}))]

    monkeypatch.setattr(placer_module, "_clock", lambda: now[0])
    monkeypatch.setattr(placer_module.followers_store, "candidates", candidates)

    async def run() -> list[str]:
        placer = Placer(db=None, queue=None, interval_s=1.0)  # type: ignore[arg-type]
        seen = [(await placer.fleet())[0].follower_id, (await placer.fleet())[0].follower_id]
        now[0] += FLEET_TTL_S - 0.001
        seen.append((await placer.fleet())[0].follower_id)  # (kept)
        now[0] += 0.001
        seen.append((await placer.fleet())[0].follower_id)  # (read again: a second old)
        placer.fleet_changed()
        seen.append((await placer.fleet())[0].follower_id)  # (read again at once)
        return seen

    assert asyncio.run(run()) == ["f1", "f1", "f1", "f2", "f3"]
    assert reads == [0.0, FLEET_TTL_S, FLEET_TTL_S]


def test_a_read_that_began_before_a_change_is_not_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    reads: list[int] = []

    async def run() -> list[str]:
        placer = Placer(db=None, queue=None, interval_s=1.0)  # type: ignore[arg-type]

        async def candidates(db: Any) -> list[Candidate]:
            reads.append(1)
            if len(reads) == 1:
                placer.fleet_changed()  # a registration lands while the first read is on its way
            return [Candidate(f"f{len(reads)}", frozenset({"onnxruntime"}))]

        monkeypatch.setattr(placer_module.followers_store, "candidates", candidates)
        return [(await placer.fleet())[0].follower_id, (await placer.fleet())[0].follower_id]

    assert asyncio.run(run()) == ["f1", "f2"] and len(reads) == 2  # (the first answer served, not kept)
