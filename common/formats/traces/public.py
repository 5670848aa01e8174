"""Public LLM trace formats, read as they are published (nothing converted by hand first):

* **Mooncake** (FAST'25 release, also AIPerf's and Dynamo's `mooncake_trace`): JSON lines of `timestamp` (ms since
  the first request), `input_length`, `output_length` and `hash_ids`, the ids of the prompt's blocks (of a fixed
  number of tokens, 512 in Mooncake's traces: `load.trace.block_tokens`); two requests whose `hash_ids` agree up to
  block k share their first k blocks. Lines may also carry `session_id` and others, ignored.
* **BurstGPT**: a CSV with the header `Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type`
  (`Timestamp` in seconds from the trace's start). A row with 0 response tokens is a failed request in the recording:
  refused, naming the line (drop those rows to replay the rest).
* **Azure LLM inference traces** (2023, 2024): a CSV with the header `TIMESTAMP,ContextTokens,GeneratedTokens`, the
  timestamp a date and time (`2023-11-16 18:15:46.6805900`); offsets are from the first row's.

Each becomes a trace of send offsets with each request's prompt and output lengths (and Mooncake's prefix blocks).
A trace that does not start at 0 is moved to: the first request is sent at the run's start.
"""

from __future__ import annotations

import csv
from collections.abc import Iterator
from datetime import datetime

from common.formats.traces.model import (
    MAX_BLOCK_ID,
    MAX_TRACE_TOKENS,
    BadTrace,
    Builder,
    Trace,
    json_object,
    number,
    tokens,
    whole,
)

MOONCAKE_FIELDS = ("timestamp", "input_length", "output_length")
BURSTGPT_HEADER = ("Timestamp", "Model", "Request tokens", "Response tokens", "Total tokens", "Log Type")
AZURE_HEADER = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")


def is_mooncake(doc: object) -> bool:
    """Whether a first JSON line is a Mooncake entry (it has input_length, not benchfleet's t or t_ms)."""
    return isinstance(doc, dict) and "input_length" in doc and "t" not in doc and "t_ms" not in doc


def csv_flavour(header: list[str]) -> str | None:
    """ "burstgpt" or "azure" for those traces' header rows, else None."""
    if tuple(header) == BURSTGPT_HEADER:
        return "burstgpt"
    if tuple(header) == AZURE_HEADER:
        return "azure"
    return None


def _hash_ids(value: object, where: str) -> tuple[int, ...]:
    if not isinstance(value, list) or not value:
        raise BadTrace(f"{where}: hash_ids must be a non-empty list of block ids, got {str(value)[:40]}")
    if len(value) > MAX_TRACE_TOKENS:
        raise BadTrace(f"{where}: hash_ids lists {len(value)} blocks, more than {MAX_TRACE_TOKENS}")
    return tuple(whole(v, where, "hash_ids", 0, MAX_BLOCK_ID) for v in value)


def parse_mooncake(lines: Iterator[tuple[int, str]]) -> Trace:
    """Mooncake's JSON lines (the module docstring)."""
    builder = Builder("Mooncake: one JSON object per line with timestamp, input_length, output_length and hash_ids")
    first_ms: float | None = None
    for n, line in lines:
        where = f"line {n}"
        doc = json_object(line, where, "timestamp, input_length, output_length and hash_ids")
        missing = [f for f in MOONCAKE_FIELDS if f not in doc]
        if missing:
            raise BadTrace(f"{where}: a Mooncake entry needs {', '.join(missing)}")
        stamp = doc["timestamp"]
        if isinstance(stamp, bool) or not isinstance(stamp, int | float):
            raise BadTrace(f"{where}: timestamp must be a number of milliseconds, got {stamp!r}")
        first_ms = float(stamp) if first_ms is None else first_ms
        lengths = tokens(doc["input_length"], where, "input_length"), tokens(doc["output_length"], where, "output_length")
        blocks = _hash_ids(doc["hash_ids"], where) if "hash_ids" in doc else None
        builder.add((float(stamp) - first_ms) / 1e3, None, where, lengths, blocks)
    return builder.build()


def parse_burstgpt(lines: Iterator[tuple[int, str]]) -> Trace:
    """BurstGPT's CSV rows, after its header (the module docstring)."""
    builder = Builder("BurstGPT: " + ",".join(BURSTGPT_HEADER) + " and one row per request")
    first_s: float | None = None
    for n, line in lines:
        where = f"line {n}"
        row = next(csv.reader([line]))
        if len(row) != len(BURSTGPT_HEADER):
            raise BadTrace(f"{where} has {len(row)} columns, BurstGPT's header has {len(BURSTGPT_HEADER)}")
        t = number(row[0], where, "Timestamp")
        first_s = t if first_s is None else first_s
        if row[3].strip() == "0":
            raise BadTrace(f"{where}: 0 Response tokens is a failed request in the recording; drop such rows to replay the rest")
        lengths = tokens(row[2], where, "Request tokens"), tokens(row[3], where, "Response tokens")
        builder.add(t - first_s, None, where, lengths)
    return builder.build()


def parse_azure(lines: Iterator[tuple[int, str]]) -> Trace:
    """Azure's LLM inference trace rows, after its header (the module docstring)."""
    builder = Builder("Azure LLM inference trace: " + ",".join(AZURE_HEADER) + " and one row per request")
    first: datetime | None = None
    for n, line in lines:
        where = f"line {n}"
        row = next(csv.reader([line]))
        if len(row) != len(AZURE_HEADER):
            raise BadTrace(f"{where} has {len(row)} columns, the Azure trace's header has {len(AZURE_HEADER)}")
        try:
            stamp = datetime.fromisoformat(row[0].strip())
        except ValueError:
            raise BadTrace(f"{where}: TIMESTAMP {row[0].strip()[:40]!r} is not a date and time") from None
        if first is not None and (stamp.tzinfo is None) != (first.tzinfo is None):
            raise BadTrace(f"{where}: TIMESTAMP {row[0].strip()[:40]!r} mixes time zones with the first row's")
        first = stamp if first is None else first
        lengths = tokens(row[1], where, "ContextTokens"), tokens(row[2], where, "GeneratedTokens")
        builder.add((stamp - first).total_seconds(), None, where, lengths)
    return builder.build()


def parse_public_csv(flavour: str, lines: Iterator[tuple[int, str]]) -> Trace:
    """The rows of a BurstGPT or Azure trace (`flavour` from csv_flavour)."""
    return parse_burstgpt(lines) if flavour == "burstgpt" else parse_azure(lines)
