"""A point's records export is encoded a chunk at a time as it is sent (leader/analysis/export.py): every format gives
every record exactly, and an export holds one chunk of text, not the whole (ten concurrent exports of 20,000 records
once added 88 MB to the leader)."""

from __future__ import annotations

import csv
import io
import json
import tracemalloc

import numpy as np
import pyarrow.parquet as pq
import pytest

from common.wire.records import decode as decode_records
from follower.loadgen.records import LoadRecords, encode_records
from leader.analysis.export import ROWS_PER_CHUNK, records_chunks


def _arrays(n: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(7)
    records = LoadRecords.allocate(10**12, np.sort(rng.integers(0, 10**9, n)))
    records.sent_ns[:] = records.intended_ns + 1000
    records.done_ns[:] = records.sent_ns + rng.integers(10**5, 10**7, n)
    records.status[:] = 200
    records.status[::7] = 503
    return decode_records(encode_records(records))


N = 2 * ROWS_PER_CHUNK + 17  # three chunks, the last a short one


@pytest.mark.parametrize("fmt", ["csv", "json", "parquet"])
def test_every_format_streams_every_record_exactly_in_chunks(fmt: str) -> None:
    arrays = _arrays(N)
    chunks = list(records_chunks(arrays, fmt))
    assert len([c for c in chunks if c]) >= 3, "encoded a chunk at a time"
    body = b"".join(chunks)
    if fmt == "csv":
        rows = list(csv.DictReader(io.StringIO(body.decode())))
        got = {name: [int(r[name]) for r in rows] for name in rows[0]}
    elif fmt == "json":
        doc = json.loads(body)
        got = {name: [r[name] for r in doc] for name in doc[0]}
    else:
        got = pq.read_table(io.BytesIO(body)).to_pydict()
    assert set(got) >= {"intended_ns", "sent_ns", "done_ns", "status", "start_ns"}
    for name, values in got.items():
        expected = np.full(N, int(arrays[name].ravel()[0])) if name == "start_ns" else arrays[name]
        assert values == expected.tolist(), name


def test_a_records_export_holds_one_chunk_not_the_whole_text() -> None:
    arrays = _arrays(20_000)
    whole = sum(len(c) for c in records_chunks(arrays, "json"))
    tracemalloc.start()
    try:
        largest = 0
        for chunk in records_chunks(arrays, "json"):
            largest = max(largest, len(chunk))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert largest < whole / 4
    # A chunk's text, its rows as Python objects and the encoder's buffers: under half the export's text (built whole,
    # as rows of dicts and then one string, the same export peaked at 62 MB, ten times its text).
    assert peak < whole / 2, f"peak {peak:,} bytes for a {whole:,}-byte export"
