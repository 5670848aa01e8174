"""Trace files: recorded request arrival times replayed by the open loop (data-set format `trace`).

benchfleet's own format, three spellings (detected from the first non-blank, non-`#` line):

* plain text: one send offset in **seconds** per line (`0.0`, `0.0125`, ...);
* CSV with a header row: a column `t` (seconds) or `t_ms` (milliseconds), optionally a column `input`: the row
  of the job's uploaded request data set that request sends (whole numbers from 0), and for a language model's job
  optionally `prompt_tokens` and `output_tokens`: that request's lengths (other columns are ignored);
* JSONL: one object per line with `t` or `t_ms`, optionally `input`, `prompt_tokens` and `output_tokens`.

And the public LLM traces as published (common.formats.traces.public): Mooncake's JSON lines (with the prompts'
prefix blocks, or its sessions: AIPerf's multi-turn lines with session_id and delay), BurstGPT's CSV and Azure's LLM
inference CSV, recognised by their fields and header rows.

Offsets are from the start of the measured run; they must be finite, non-negative, at most MAX_DURATION_S and
never decrease (a trace is a recording, not a set: it is refused, not sorted, so a shuffled file is noticed).
Either every entry names an `input` or none does, and the same for the lengths (both or neither). Parsing only reads
numbers: no user code runs anywhere.
"""

from __future__ import annotations

import csv
import io
import itertools
import json
from collections.abc import Iterator
from typing import IO

from common.formats.lines import bounded_lines
from common.formats.traces import native, public
from common.formats.traces.model import MAX_TRACE_FILE_ENTRIES, MAX_TRACE_LINE_CHARS, MAX_TRACE_TOKENS, BadTrace, Blocks, Trace

__all__ = [
    "MAX_TRACE_FILE_ENTRIES",
    "MAX_TRACE_LINE_CHARS",
    "MAX_TRACE_TOKENS",
    "BadTrace",
    "Blocks",
    "Trace",
    "inspect_trace",
    "load_trace",
    "parse_trace",
    "trace_facts",
]


def parse_trace(fp: IO[bytes]) -> Trace:
    """Parse a trace file (see the module docstring), or raise BadTrace saying where and why it is not one."""
    fp.seek(0)
    text = io.TextIOWrapper(fp, encoding="utf-8", errors="strict", newline="")
    try:
        return _parse(_entries(text))
    finally:
        text.detach()  # the caller's file stays open (an upload is streamed into GridFS next)


def _entries(text: IO[str]) -> Iterator[tuple[int, str]]:
    """(number, stripped line) of each line that is not blank or a comment, read one at a time."""
    for n, line in bounded_lines(text, MAX_TRACE_LINE_CHARS, bad=BadTrace):
        if line.strip() and not line.lstrip().startswith("#"):
            yield n, line.strip()


def _first_json(line: str) -> object:
    try:
        return json.loads(line)
    except json.JSONDecodeError:
        return None  # the reader names the line and the error


def _parse(body: Iterator[tuple[int, str]]) -> Trace:
    start = next(body, None)
    if start is None:
        raise BadTrace(f"no entries ({native.EXPECTED})")
    first = start[1]
    if first.startswith("{"):
        lines = itertools.chain([start], body)
        return public.parse_mooncake(lines) if public.is_mooncake(_first_json(first)) else native.parse_jsonl(lines)
    if any(c.isalpha() for c in first.replace("e", "").replace("E", "")) or "," in first:
        flavour = public.csv_flavour([h.strip() for h in next(csv.reader([first]))])
        return public.parse_public_csv(flavour, body) if flavour else native.parse_csv(start, body)
    return native.parse_offsets(start, body)


def inspect_trace(fp: IO[bytes]) -> tuple[int, list[str]]:
    """(entries, fields) of a trace file for its data-set metadata: "t", and "input", "prompt_tokens",
    "output_tokens" and "hash_ids" where it gives them."""
    trace = parse_trace(fp)
    return len(trace), trace.fields


def load_trace(path: str) -> Trace:
    """A stored trace file (already checked at upload; parsed again, the same way)."""
    with open(path, "rb") as fh:
        return parse_trace(fh)


def trace_facts(fp: IO[bytes]) -> tuple[float, int | None]:
    """(span_s, max_input) of a trace file, stored with its metadata so a job is checked against it at submission."""
    trace = parse_trace(fp)
    return trace.span_s, trace.max_input
