"""Raw per-request records: one compressed npz blob per point in GridFS bucket `records`.

`leader/store/records.py` stores and loads them; this decodes the arrays intended_ns, sent_ns,
first_byte_ns, done_ns and status into latencies.
"""

from __future__ import annotations

import io

import numpy as np

from leader.store.records import load_records

__all__ = ["decode", "latencies_ms", "load_records", "timed_latencies_ms"]

ARRAYS = ("intended_ns", "sent_ns", "first_byte_ns", "done_ns", "status")
# The generator records the HTTP status; 0 is a transport error, negative codes never sent or dropped.
OK_STATUSES = (200,)


def decode(blob: bytes) -> dict[str, np.ndarray]:
    """The arrays of an npz blob (no pickles: allow_pickle stays off)."""
    with np.load(io.BytesIO(blob), allow_pickle=False) as data:
        return {name: data[name] for name in data.files}


def timed_latencies_ms(arrays: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(intended ns, latency ms) of every answered request: latency from its intended send time."""
    done = arrays["done_ns"].astype(np.int64)
    intended = arrays["intended_ns"].astype(np.int64)
    ok = np.isin(arrays["status"], OK_STATUSES) if "status" in arrays else np.ones(done.shape, bool)
    return intended[ok], (done[ok] - intended[ok]) / 1e6


def latencies_ms(arrays: dict[str, np.ndarray]) -> np.ndarray:
    """Latency of every answered request from its intended send time, in milliseconds."""
    return timed_latencies_ms(arrays)[1]
