"""Raw per-request records: one compressed npz blob per point in GridFS bucket `records` (common.wire.records).

`leader/store/records.py` stores and loads them; this turns them into the latencies every view reads: the measured
requests only (warm-up excluded, as the point's own summary counts them), from their intended send time.
"""

from __future__ import annotations

import numpy as np

from common.wire.records import OK, decode, measured_mask
from common.wire.results import PointResult
from leader.store.records import load_records

__all__ = ["decode", "load_records", "measured_latencies_ms"]


def measured_latencies_ms(arrays: dict[str, np.ndarray], result: PointResult) -> tuple[np.ndarray, np.ndarray]:
    """(intended ns, latency ms) of every answered request of the point's measured window, from its intended time."""
    done = arrays["done_ns"].astype(np.int64)
    intended = arrays["intended_ns"].astype(np.int64)
    keep = measured_mask(arrays, warmup_s=result.point.warmup_s, measured_s=result.measured_s)
    if "status" in arrays:
        keep &= arrays["status"] == OK
    return intended[keep], (done[keep] - intended[keep]) / 1e6
