"""Raw per-request records: one compressed npz blob per point in GridFS bucket `records`.

`leader/store/records.py` stores and loads them; this decodes the arrays intended_ns, sent_ns,
first_byte_ns, done_ns and status (common.records) into latencies.
"""

from __future__ import annotations

import numpy as np

from common.records import OK, decode
from leader.store.records import load_records

__all__ = ["decode", "latencies_ms", "load_records", "timed_latencies_ms"]


def timed_latencies_ms(arrays: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(intended ns, latency ms) of every answered request: latency from its intended send time."""
    done = arrays["done_ns"].astype(np.int64)
    intended = arrays["intended_ns"].astype(np.int64)
    ok = (arrays["status"] == OK) if "status" in arrays else np.ones(done.shape, bool)
    return intended[ok], (done[ok] - intended[ok]) / 1e6


def latencies_ms(arrays: dict[str, np.ndarray]) -> np.ndarray:
    """Latency of every answered request from its intended send time, in milliseconds."""
    return timed_latencies_ms(arrays)[1]
