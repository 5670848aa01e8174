"""Raw per-request records as one compressed columnar blob (npz of int64/int32 arrays) per point."""

from __future__ import annotations

import io

import numpy as np

from follower.loadgen.openloop import LoadRecords


def encode_records(records: LoadRecords) -> bytes:
    """The records as an npz: intended/sent/first_byte/done ns, status, capped, and one array per server stage."""
    arrays: dict[str, np.ndarray] = {
        "intended_ns": records.intended_ns.astype(np.int64),
        "sent_ns": records.sent_ns.astype(np.int64),
        "first_byte_ns": records.first_byte_ns.astype(np.int64),
        "done_ns": records.done_ns.astype(np.int64),
        "status": records.status.astype(np.int64),
        "capped": records.capped.astype(np.int64) if len(records.capped) == len(records) else np.zeros(len(records), np.int64),
        "start_ns": np.asarray([records.start_ns], dtype=np.int64),
    }
    for stage, values in records.stages_ns.items():
        arrays[f"stage_{stage}"] = values.astype(np.int64)
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **arrays)
    return buffer.getvalue()


def decode_records(data: bytes) -> dict[str, np.ndarray]:
    """The arrays of an `encode_records` blob (no pickles are loaded)."""
    with np.load(io.BytesIO(data), allow_pickle=False) as npz:
        return {name: npz[name] for name in npz.files}
