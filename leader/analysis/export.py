"""Exports of a job's results (CSV, JSON, Parquet) and of a point's raw records."""

from __future__ import annotations

import csv
import io
import json
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


def records_bytes(arrays: dict[str, np.ndarray], fmt: str) -> bytes:
    """One point's raw records (a decoded common.wire.records blob) in the given format, one row per request."""
    check_format(fmt)
    columns = per_request(arrays)
    if fmt == "parquet":
        out = io.BytesIO()
        pq.write_table(pa.table(columns), out)
        return out.getvalue()
    rows = [dict(zip(columns, values, strict=True)) for values in zip(*(c.tolist() for c in columns.values()), strict=True)]
    return table_bytes(rows, fmt)
