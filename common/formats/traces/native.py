"""benchfleet's own trace file, in three spellings (see common.formats.traces)."""

from __future__ import annotations

import csv
import itertools
from collections.abc import Iterator

from common.formats.traces.model import BadTrace, Builder, Trace, json_object, number, tokens, whole

EXPECTED = "one send offset per line, a CSV with a t or t_ms column, or JSONL"


def _lengths(get: dict[str, object], where: str) -> tuple[int, int] | None:
    """An entry's (prompt_tokens, output_tokens), None when it gives neither."""
    has = [k for k in ("prompt_tokens", "output_tokens") if get.get(k) not in (None, "")]
    if not has:
        return None
    if len(has) == 1:
        raise BadTrace(f"{where}: give both prompt_tokens and output_tokens, or neither")
    return tokens(get["prompt_tokens"], where, "prompt_tokens"), tokens(get["output_tokens"], where, "output_tokens")


def _time_column(names: list[str], where: str) -> tuple[str, float]:
    if "t" in names and "t_ms" in names:
        raise BadTrace(f"{where}: give either t (seconds) or t_ms (milliseconds), not both")
    if "t" in names:
        return "t", 1.0
    if "t_ms" in names:
        return "t_ms", 1e-3
    raise BadTrace(f"{where}: no t (seconds) or t_ms (milliseconds) column; the columns are {names}")


def parse_jsonl(lines: Iterator[tuple[int, str]]) -> Trace:
    """JSON lines with t or t_ms, optionally input, prompt_tokens and output_tokens."""
    builder = Builder(EXPECTED)
    for n, line in lines:
        where = f"line {n}"
        doc = json_object(line, where, "t or t_ms")
        column, scale = _time_column(sorted(doc), where)
        value = doc[column]
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise BadTrace(f"{where}: {column} must be a number, got {value!r}")
        builder.add(float(value) * scale, whole(doc["input"], where) if "input" in doc else None, where, _lengths(doc, where))
    return builder.build()


def parse_csv(start: tuple[int, str], lines: Iterator[tuple[int, str]]) -> Trace:
    """A CSV whose header (`start`) names t or t_ms, optionally input, prompt_tokens and output_tokens."""
    header = [h.strip() for h in next(csv.reader([start[1]]))]
    column, scale = _time_column(header, f"line {start[0]} (header)")
    t_at = header.index(column)
    input_at = header.index("input") if "input" in header else None
    builder = Builder(EXPECTED)
    for n, line in lines:
        where = f"line {n}"
        row = next(csv.reader([line]))
        if len(row) != len(header):
            raise BadTrace(f"{where} has {len(row)} columns, the header has {len(header)}")
        t = number(row[t_at], where, column) * scale
        builder.add(
            t,
            whole(row[input_at], where) if input_at is not None else None,
            where,
            _lengths(dict(zip(header, row, strict=True)), where),
        )
    return builder.build()


def parse_offsets(start: tuple[int, str], lines: Iterator[tuple[int, str]]) -> Trace:
    """Plain text: one send offset in seconds per line."""
    builder = Builder(EXPECTED)
    for n, line in itertools.chain([start], lines):
        builder.add(number(line, f"line {n}", "offset"), None, f"line {n}")
    return builder.build()
