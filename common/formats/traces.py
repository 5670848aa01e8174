"""Trace files: recorded request arrival times replayed by the open loop (data-set format `trace`).

One documented format, three spellings (detected from the first non-blank, non-`#` line):

* plain text: one send offset in **seconds** per line (`0.0`, `0.0125`, ...);
* CSV with a header row: a column `t` (seconds) or `t_ms` (milliseconds), optionally a column `input`: the row
  of the job's uploaded request data set that request sends (whole numbers from 0), and for a language model's job
  optionally `prompt_tokens` and `output_tokens`: that request's lengths (other columns are ignored);
* JSONL: one object per line with `t` or `t_ms`, optionally `input`, `prompt_tokens` and `output_tokens`.

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
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO

import numpy as np

from common.formats.lines import bounded_lines
from common.spec.load import MAX_DURATION_S

# One trace feeds one run; a million arrivals is ~3 min at 5k req/s, far more than one point ever sends.
MAX_TRACE_FILE_ENTRIES = 1_000_000
MAX_TRACE_TOKENS = 131_072
MAX_TRACE_LINE_CHARS = 65_536  # one entry: a send offset and its request's lengths


class BadTrace(ValueError):
    """The bytes are not a trace file (the message names the line and what is wrong)."""


@dataclass(frozen=True)
class Trace:
    """A parsed trace: send offsets (int64 ns, non-decreasing) and, optionally, the request-data row of each and a
    language model's prompt and output tokens of each."""

    offsets_ns: np.ndarray
    inputs: np.ndarray | None = None
    prompt_tokens: np.ndarray | None = None
    output_tokens: np.ndarray | None = None

    @property
    def fields(self) -> list[str]:
        """What each entry gives, for the data set's metadata."""
        named = ["input"] if self.inputs is not None else []
        named += ["output_tokens", "prompt_tokens"] if self.prompt_tokens is not None else []
        return sorted([*named, "t"])

    def __len__(self) -> int:
        return len(self.offsets_ns)

    @property
    def span_s(self) -> float:
        """The last offset in seconds (0 for an empty trace)."""
        return float(self.offsets_ns[-1]) / 1e9 if len(self.offsets_ns) else 0.0

    @property
    def max_input(self) -> int | None:
        """The largest request-data row the trace names, if it names any."""
        return int(self.inputs.max()) if self.inputs is not None and len(self.inputs) else None

    def within(self, duration_s: float) -> Trace:
        """The entries whose offset lies in [0, duration_s): what a run of that length replays."""
        end_ns = int(round(duration_s * 1e9))
        keep = int(np.searchsorted(self.offsets_ns, end_ns, side="left"))

        def cut(values: np.ndarray | None) -> np.ndarray | None:
            return None if values is None else values[:keep]

        return Trace(self.offsets_ns[:keep], cut(self.inputs), cut(self.prompt_tokens), cut(self.output_tokens))


def _number(text: str, where: str, column: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise BadTrace(f"{where}: {column} {text.strip()[:40]!r} is not a number") from None
    return value


def _whole(value: object, where: str, column: str = "input", least: int = 0, most: int | None = None) -> int:
    bound = f"in {least}..{most}" if most is not None else f">= {least}"
    if isinstance(value, bool):
        raise BadTrace(f"{where}: {column} must be a whole number {bound}, got {value!r}")
    if isinstance(value, str):
        text = value.strip()
        try:
            value = int(text)
        except ValueError:
            raise BadTrace(f"{where}: {column} must be a whole number {bound}, got {text[:40]!r}") from None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int) or value < least or (most is not None and value > most):
        raise BadTrace(f"{where}: {column} must be a whole number {bound}, got {value!r}")
    return value


def _lengths(get: dict[str, object], where: str) -> tuple[int, int] | None:
    """An entry's (prompt_tokens, output_tokens), None when it gives neither."""
    has = [k for k in ("prompt_tokens", "output_tokens") if get.get(k) not in (None, "")]
    if not has:
        return None
    if len(has) == 1:
        raise BadTrace(f"{where}: give both prompt_tokens and output_tokens, or neither")
    return (
        _whole(get["prompt_tokens"], where, "prompt_tokens", 1, MAX_TRACE_TOKENS),
        _whole(get["output_tokens"], where, "output_tokens", 1, MAX_TRACE_TOKENS),
    )


class _Builder:
    """Collects (seconds, input) entries and checks them as they come."""

    def __init__(self) -> None:
        self.seconds: list[float] = []
        self.inputs: list[int] = []
        self.lengths: list[tuple[int, int]] = []
        self.with_input: bool | None = None
        self.with_lengths: bool | None = None

    def add(self, t: float, input_index: int | None, where: str, lengths: tuple[int, int] | None = None) -> None:
        if not math.isfinite(t) or t < 0:
            raise BadTrace(f"{where}: offset {t!r} must be a finite number of seconds >= 0")
        if t > MAX_DURATION_S:
            raise BadTrace(f"{where}: offset {t:g} s is beyond the longest run ({MAX_DURATION_S:g} s)")
        if self.seconds and t < self.seconds[-1]:
            raise BadTrace(
                f"{where}: offset {t:g} s is earlier than the one before ({self.seconds[-1]:g} s); offsets must never decrease"
            )
        has = input_index is not None
        if self.with_input is None:
            self.with_input = has
        elif self.with_input != has:
            raise BadTrace(f"{where}: either every entry names an input or none does")
        if self.with_lengths is None:
            self.with_lengths = lengths is not None
        elif self.with_lengths != (lengths is not None):
            raise BadTrace(f"{where}: either every entry gives prompt_tokens and output_tokens or none does")
        if len(self.seconds) >= MAX_TRACE_FILE_ENTRIES:
            raise BadTrace(f"more than {MAX_TRACE_FILE_ENTRIES} entries")
        self.seconds.append(t)
        if input_index is not None:
            self.inputs.append(input_index)
        if lengths is not None:
            self.lengths.append(lengths)

    def build(self) -> Trace:
        if not self.seconds:
            raise BadTrace("no entries (one send offset per line, a CSV with a t or t_ms column, or JSONL)")
        offsets = np.round(np.asarray(self.seconds, dtype=np.float64) * 1e9).astype(np.int64)
        inputs = np.asarray(self.inputs, dtype=np.int64) if self.with_input else None
        if not self.with_lengths:
            return Trace(offsets, inputs)
        lengths = np.asarray(self.lengths, dtype=np.int64)
        return Trace(offsets, inputs, lengths[:, 0].copy(), lengths[:, 1].copy())


def _time_column(names: list[str], where: str) -> tuple[str, float]:
    if "t" in names and "t_ms" in names:
        raise BadTrace(f"{where}: give either t (seconds) or t_ms (milliseconds), not both")
    if "t" in names:
        return "t", 1.0
    if "t_ms" in names:
        return "t_ms", 1e-3
    raise BadTrace(f"{where}: no t (seconds) or t_ms (milliseconds) column; the columns are {names}")


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


def _parse(body: Iterator[tuple[int, str]]) -> Trace:
    start = next(body, None)
    if start is None:
        raise BadTrace("no entries (one send offset per line, a CSV with a t or t_ms column, or JSONL)")
    builder = _Builder()
    first = start[1]
    if first.startswith("{"):
        for n, line in itertools.chain([start], body):
            where = f"line {n}"
            try:
                doc = json.loads(line)
            except json.JSONDecodeError as exc:
                raise BadTrace(f"{where} is not JSON: {exc}") from None
            if not isinstance(doc, dict):
                raise BadTrace(f"{where} must be an object with t or t_ms")
            column, scale = _time_column(sorted(doc), where)
            value = doc[column]
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise BadTrace(f"{where}: {column} must be a number, got {value!r}")
            builder.add(
                float(value) * scale, _whole(doc["input"], where) if "input" in doc else None, where, _lengths(doc, where)
            )
        return builder.build()
    if any(c.isalpha() for c in first.replace("e", "").replace("E", "")) or "," in first:
        header = [h.strip() for h in next(csv.reader([first]))]
        column, scale = _time_column(header, f"line {start[0]} (header)")
        t_at = header.index(column)
        input_at = header.index("input") if "input" in header else None
        for n, line in body:
            where = f"line {n}"
            row = next(csv.reader([line]))
            if len(row) != len(header):
                raise BadTrace(f"{where} has {len(row)} columns, the header has {len(header)}")
            t = _number(row[t_at], where, column) * scale
            builder.add(
                t,
                _whole(row[input_at], where) if input_at is not None else None,
                where,
                _lengths(dict(zip(header, row, strict=True)), where),
            )
        return builder.build()
    for n, line in itertools.chain([start], body):
        builder.add(_number(line, f"line {n}", "offset"), None, f"line {n}")
    return builder.build()


def inspect_trace(fp: IO[bytes]) -> tuple[int, list[str]]:
    """(entries, fields) of a trace file for its data-set metadata: "t", and "input", "prompt_tokens" and
    "output_tokens" where it gives them."""
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
