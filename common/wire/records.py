"""The raw-records format: a point's per-request records as one compressed npz of int64 columns, no pickles.

Written by the follower after each point (one blob per point, GridFS bucket `records` on the leader), read by the
leader's analysis and exports. Times are absolute CLOCK_MONOTONIC ns of the generator's host (-1: did not happen).
"""

from __future__ import annotations

import io
import zipfile
from collections.abc import Mapping

import numpy as np

# One entry per scheduled request, in schedule order: intended, sent, first byte and done times, the status (below)
# and whether the request found the in-flight cap full at its time (1) or not (0).
COLUMNS = ("intended_ns", "sent_ns", "first_byte_ns", "done_ns", "status", "capped")
# What every blob carries whoever wrote it (`capped` and the stage columns came later).
REQUIRED = COLUMNS[:5]
# The run's start (one value), beside the columns.
START = "start_ns"
# Server stage timings, one column per stage as `stage_<name>`; -1 where the server reported none.
STAGE_PREFIX = "stage_"
STAGES = ("queue_ns", "infer_ns", "decode_ns", "encode_ns", "preprocess_ns", "postprocess_ns")
# Stages only a server running processors reports (data.processing: server); -1 elsewhere, which means "none ran".
OPTIONAL_STAGES = ("preprocess_ns", "postprocess_ns")

# A language model's records beside the columns: per request (LLM_COLUMNS: the server's prompt and output token
# counts, -1 unknown; the data events received; in a load shard's blob, the client tokenizer's count of the text),
# and every token event, its arrival in request order (LLM_TOKENS, flat) with LLM_OFFSETS (n + 1 entries: request
# i's events are LLM_TOKENS[offsets[i]:offsets[i + 1]]).
LLM_COLUMNS = ("llm_prompt_tokens", "llm_completion_tokens", "llm_events", "llm_client_tokens")
LLM_TOKENS, LLM_OFFSETS = "llm_token_ns", "llm_token_offsets"
RAGGED = (LLM_TOKENS, LLM_OFFSETS)  # not one entry per request: kept out of per-request tables

# Status codes: HTTP statuses (gRPC codes mapped to them), and beside them: never sent (stopped before its time),
# failed without an answer, dropped because the in-flight cap was full at its time (cap_policy "drop"), and sent but
# still unanswered when the run ended (its point's drain bound ran out, or the run was cancelled).
OK = 200
NOT_SENT = -1
TRANSPORT_ERROR = 0
DROPPED = -2
UNANSWERED = -3


def encode(
    columns: Mapping[str, np.ndarray],
    stages: Mapping[str, np.ndarray],
    start_ns: int,
    llm: Mapping[str, np.ndarray] | None = None,
) -> bytes:
    """The blob of one point's records (every column of COLUMNS, stage columns by name, a language model's by theirs)."""
    missing = [name for name in COLUMNS if name not in columns]
    if missing:
        raise ValueError(f"records lack column(s) {', '.join(missing)}")
    arrays = {name: np.asarray(columns[name]).astype(np.int64) for name in COLUMNS}
    arrays[START] = np.asarray([start_ns], dtype=np.int64)
    for stage, values in stages.items():
        arrays[f"{STAGE_PREFIX}{stage}"] = np.asarray(values).astype(np.int64)
    for name, values in (llm or {}).items():
        if name not in (*LLM_COLUMNS, *RAGGED):
            raise ValueError(f"unknown language-model column {name!r}")
        arrays[name] = np.asarray(values).astype(np.int64)
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **arrays)  # type: ignore[arg-type]  # numpy's stub types **kwds as ArrayLike
    return buffer.getvalue()


def decode(blob: bytes) -> dict[str, np.ndarray]:
    """The arrays of a blob by name (allow_pickle stays off)."""
    with np.load(io.BytesIO(blob), allow_pickle=False) as data:
        return {name: data[name] for name in data.files}


def missing_columns(blob: bytes) -> list[str]:
    """The required columns a blob lacks, read from its member names only (nothing decoded, nothing unpickled);
    ValueError when it is not an npz archive at all."""
    try:
        with zipfile.ZipFile(io.BytesIO(blob)) as archive:
            names = {name.removesuffix(".npy") for name in archive.namelist()}
    except zipfile.BadZipFile:
        raise ValueError("records must be an npz archive (numpy.savez_compressed)") from None
    return [name for name in REQUIRED if name not in names]


def per_request(arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """A decoded blob as a table of one row per request: its columns and stage columns, with the run's start repeated
    on every row (it is stored once)."""
    n = len(arrays["intended_ns"])
    table = {
        name: values
        for name, values in arrays.items()
        if name != START and name not in RAGGED and np.ndim(values) == 1 and len(values) == n
    }
    if START in arrays:
        table[START] = np.full(n, int(np.asarray(arrays[START]).ravel()[0]), dtype=np.int64)
    return table


def measured_mask(arrays: dict[str, np.ndarray], *, warmup_s: float, measured_s: float) -> np.ndarray:
    """Which requests belong to the measured window: intended at or after the run's start plus the warm-up, and
    before the end of what was measured (the bounds the follower's verdict used). Blobs that carry no start (none
    written by a follower) are taken as measured whole."""
    intended = np.asarray(arrays["intended_ns"], dtype=np.int64)
    if START not in arrays:
        return np.ones(intended.shape, dtype=bool)
    start = int(np.asarray(arrays[START]).ravel()[0]) + int(round(warmup_s * 1e9))
    return (intended >= start) & (intended < start + int(round(measured_s * 1e9)))
