"""Two generator processes against the real ORT server merge to exactly the schedule."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from common.stats import decode
from common.stats import merge as merge_hdr
from common.wire.models import ModelMeta
from follower.backends import get_backend
from follower.loadgen.bodies import build_bodies
from follower.loadgen.scaleout import drive_processes, merge
from follower.loadgen.schedule import arrival_offsets_ns
from follower.loadgen.verdict import summarize_window

pytestmark = pytest.mark.integration


def test_two_processes_merge_to_the_schedule(mlp_meta: ModelMeta, mlp_path: Path, tmp_path: Path) -> None:
    backend = get_backend("onnxruntime")
    backend.start(mlp_path, mlp_meta, tmp_path)
    try:
        backend.wait_ready(60.0)
        offsets = arrival_offsets_ns("poisson", 200.0, 1.5, seed=21)
        # Both processes on one generator core: pinned there at raised priority, not real-time (they share it).
        parts = drive_processes(backend.serves(mlp_meta), build_bodies(mlp_meta.inputs, 1, seed=0), offsets, 2,
                                max_concurrency=64, cpus=sorted(os.sched_getaffinity(0))[:1])  # fmt: skip
    finally:
        backend.stop()
    assert len(parts) == 2 and {len(p) for p in parts} <= {len(offsets) // 2, len(offsets) // 2 + 1}
    assert parts[0].start_ns == parts[1].start_ns  # one shared start on the system-wide monotonic clock
    records = merge(parts, parts[0].start_ns)
    assert len(records) == len(offsets)
    assert np.array_equal(records.intended_ns, parts[0].start_ns + offsets)
    assert int(records.ok.sum()) == len(offsets), records.error_sample
    assert parts[0].scheduling is not None and parts[0].scheduling.startswith("nice")
    assert records.scheduling == parts[0].scheduling == parts[1].scheduling
    # Each process's histogram merges (HDR) to the count of the merged raw records' histogram.
    whole = summarize_window(records, 1.5)
    halves = [summarize_window(p, 1.5) for p in parts]
    assert whole.latency_hdr is not None and all(h.latency_hdr for h in halves)
    merged = merge_hdr([h.latency_hdr for h in halves if h.latency_hdr])
    assert merged.get_total_count() == decode(whole.latency_hdr).get_total_count() == len(offsets)
    assert merged.get_value_at_percentile(99) == decode(whole.latency_hdr).get_value_at_percentile(99)
