"""Exports of a job's results (CSV, JSON, Parquet) and of a point's raw records."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from common.errors import InvalidRequest
from common.wire.records import per_request

FORMATS = ("csv", "json", "parquet")
MEDIA = {"csv": "text/csv; charset=utf-8", "json": "application/json", "parquet": "application/vnd.apache.parquet"}


def check_format(fmt: str) -> str:
    """A known export format, or 400 naming the field."""
    if fmt not in FORMATS:
        raise InvalidRequest(f"format must be one of {', '.join(FORMATS)}", field="format")
    return fmt


def table_bytes(rows: list[dict[str, Any]], fmt: str) -> bytes:
    """Flat rows (same keys) in the given format."""
    check_format(fmt)
    if fmt == "json":
        return json.dumps(rows, default=str, indent=1).encode()
    if fmt == "csv":
        buffer = io.StringIO()
        columns = list(rows[0]) if rows else []
        writer = csv.DictWriter(buffer, fieldnames=columns, extrasaction="ignore")
        writer.writeheader()
        for row in rows:
            writer.writerow({k: ("" if v is None else v) for k, v in row.items()})
        return buffer.getvalue().encode()
    table = pa.Table.from_pylist(rows) if rows else pa.table({})
    out = io.BytesIO()
    pq.write_table(table, out)
    return out.getvalue()


# Rows encoded per chunk of a streamed records export: what one export holds besides the decoded columns.
ROWS_PER_CHUNK = 1024


class _Sink:
    """A file-like that keeps what is written until taken (Parquet's writer writes into it, a row group at a time)."""

    def __init__(self) -> None:
        self.parts: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> int:
        self.parts.append(bytes(data))
        return len(data)

    def flush(self) -> None:
        pass

    def take(self) -> bytes:
        out, self.parts = b"".join(self.parts), []
        return out


def records_chunks(arrays: dict[str, np.ndarray], fmt: str) -> Iterator[bytes]:
    """One point's raw records (a decoded common.wire.records blob) in the given format, one row per request, encoded
    ROWS_PER_CHUNK rows at a time: an export holds its columns and one chunk, never the whole text (ten concurrent
    exports of 20,000 records once added 88 MB to the leader)."""
    check_format(fmt)
    columns = per_request(arrays)
    names = list(columns)
    n = len(next(iter(columns.values()))) if columns else 0
    spans = range(0, n, ROWS_PER_CHUNK)
    if fmt == "parquet":
        sink = _Sink()
        with pq.ParquetWriter(sink, pa.schema([(name, pa.from_numpy_dtype(columns[name].dtype)) for name in names])) as writer:
            for start in spans:
                writer.write_table(pa.table({name: columns[name][start : start + ROWS_PER_CHUNK] for name in names}))
                yield sink.take()
        yield sink.take()  # the footer
        return
    if fmt == "csv":
        buffer = io.StringIO()
        writer_csv = csv.writer(buffer, lineterminator="\r\n")  # (csv.DictWriter's line ends, as table_bytes writes)
        writer_csv.writerow(names)
        for start in spans:
            writer_csv.writerows(zip(*(columns[name][start : start + ROWS_PER_CHUNK].tolist() for name in names), strict=True))
            yield buffer.getvalue().encode()
            buffer.seek(0)
            buffer.truncate()
        if buffer.tell():
            yield buffer.getvalue().encode()
        return
    yield b"["
    sep = b"\n"
    for start in spans:
        values = zip(*(columns[name][start : start + ROWS_PER_CHUNK].tolist() for name in names), strict=True)
        rows = [json.dumps(dict(zip(names, row, strict=True))) for row in values]
        yield sep + ",\n".join(rows).encode()
        sep = b",\n"
    yield b"\n]\n"
