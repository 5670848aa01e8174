"""The leader's collector tuning (leader/__main__.py): what it built before serving is frozen out of the scans and
young collections are rarer (the stalls it removes are bench/leader_load.py's: full scans of 400,000 objects, 300 ms
each, 37 times in a 10,000-job storm)."""

from __future__ import annotations

import gc

from leader.__main__ import GC_THRESHOLDS, tune_collector


def test_the_leader_freezes_what_it_built_and_collects_at_its_thresholds() -> None:
    before, frozen = gc.get_threshold(), gc.get_freeze_count()
    try:
        tune_collector()
        assert gc.get_threshold() == GC_THRESHOLDS == (50_000, 20, 10)
        assert gc.get_freeze_count() > frozen and gc.get_objects(generation=2) == []  # (every old object frozen)
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)
