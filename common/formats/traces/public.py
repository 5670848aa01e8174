"""Public LLM trace formats, read as they are published (nothing converted by hand first):

* **Mooncake** (FAST'25 release, also AIPerf's and Dynamo's `mooncake_trace`): JSON lines of `timestamp` (ms since
  the first request), `input_length`, `output_length` and `hash_ids`, the ids of the prompt's blocks (of a fixed
  number of tokens, 512 in Mooncake's traces: `load.trace.block_tokens`); two requests whose `hash_ids` agree up to
  block k share their first k blocks. Other fields are ignored.
* **Mooncake sessions** (AIPerf's multi-turn extension of it): every line also has a `session_id`; a session's first
  line gives its `timestamp` (the session's arrival), each later line its `delay`: the pause in ms after the answer
  before it (the user's or the tool's time; none is 0). A first turn's `input_length` is its prompt, a later turn's
  the new message the context grows by (the answers before it are the context too); no `hash_ids` (a session's own
  context is what its turns share). Sessions may interleave; their arrivals, in the order they first appear, must
  never decrease.
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
from dataclasses import dataclass, field
from datetime import datetime
from itertools import chain

from common.formats.traces.model import (
    MAX_BLOCK_ID,
    MAX_SESSION_ID_CHARS,
    MAX_TRACE_TOKENS,
    BadTrace,
    Builder,
    Trace,
    json_object,
    number,
    tokens,
    whole,
)
from common.spec.llm import MAX_SESSION_TURNS, MAX_THINK_S

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


def _milliseconds(value: object, where: str, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise BadTrace(f"{where}: {name} must be a number of milliseconds, got {value!r}")
    return float(value)


def _lengths(doc: dict[str, object], where: str) -> tuple[int, int]:
    return tokens(doc["input_length"], where, "input_length"), tokens(doc["output_length"], where, "output_length")


def parse_mooncake(lines: Iterator[tuple[int, str]]) -> Trace:
    """Mooncake's JSON lines, or its sessions where the first line has a session_id (the module docstring)."""
    start = next(lines, None)
    if start is not None:
        doc = json_object(start[1], f"line {start[0]}", "timestamp, input_length, output_length and hash_ids")
        if "session_id" in doc:
            return _parse_sessions(chain([start], lines))
        lines = chain([start], lines)
    builder = Builder("Mooncake: one JSON object per line with timestamp, input_length, output_length and hash_ids")
    first_ms: float | None = None
    for n, line in lines:
        where = f"line {n}"
        doc = json_object(line, where, "timestamp, input_length, output_length and hash_ids")
        missing = [f for f in MOONCAKE_FIELDS if f not in doc]
        if missing:
            raise BadTrace(f"{where}: a Mooncake entry needs {', '.join(missing)}")
        if "session_id" in doc:
            raise BadTrace(f"{where}: either every entry gives a session_id or none does")
        stamp = _milliseconds(doc["timestamp"], where, "timestamp")
        first_ms = stamp if first_ms is None else first_ms
        blocks = _hash_ids(doc["hash_ids"], where) if "hash_ids" in doc else None
        builder.add((stamp - first_ms) / 1e3, None, where, _lengths(doc, where), blocks)
    return builder.build()


@dataclass
class _Session:
    where: str  # its first line
    arrival_ms: float
    turns: list[tuple[str, tuple[int, int], int]] = field(default_factory=list)  # (line, lengths, delay ns)
    context: int = 0  # its last turn's context so far: every prompt and answer before it and its own


def _parse_sessions(lines: Iterator[tuple[int, str]]) -> Trace:
    """Mooncake's multi-turn lines (the module docstring): each session at its arrival, its turns in order."""
    sessions: dict[str, _Session] = {}
    for n, line in lines:
        where = f"line {n}"
        doc = json_object(line, where, "session_id, timestamp or delay, input_length and output_length")
        sid = doc.get("session_id")
        if sid is None:
            raise BadTrace(f"{where}: either every entry gives a session_id or none does")
        if isinstance(sid, bool) or not isinstance(sid, str | int) or not 0 < len(str(sid)) <= MAX_SESSION_ID_CHARS:
            raise BadTrace(f"{where}: session_id must be a string of 1..{MAX_SESSION_ID_CHARS} characters, got {sid!r}")
        if missing := [f for f in ("input_length", "output_length") if f not in doc]:
            raise BadTrace(f"{where}: a Mooncake entry needs {', '.join(missing)}")
        if "hash_ids" in doc:
            raise BadTrace(f"{where}: hash_ids with a session_id: a session's turns share their own context, not blocks")
        lengths, key = _lengths(doc, where), str(sid)
        session = sessions.get(key)
        if session is None:
            if "timestamp" not in doc or "delay" in doc:
                raise BadTrace(f"{where}: session {key!r} starts here: its first turn gives a timestamp (ms), not a delay")
            session = sessions[key] = _Session(where, _milliseconds(doc["timestamp"], where, "timestamp"))
            delay_ns = 0
        else:
            if "timestamp" in doc:
                raise BadTrace(
                    f"{where}: a later turn of session {key!r} is due its delay (ms) after the answer before it, "
                    "not at a timestamp"
                )
            delay_s = _milliseconds(doc.get("delay", 0), where, "delay") / 1e3
            if not 0 <= delay_s <= MAX_THINK_S:  # NaN fails too
                raise BadTrace(f"{where}: delay {delay_s * 1e3:g} ms must be 0..{MAX_THINK_S * 1e3:g} ms")
            if len(session.turns) >= MAX_SESSION_TURNS:
                raise BadTrace(f"{where}: session {key!r} has more than {MAX_SESSION_TURNS} turns")
            delay_ns = int(round(delay_s * 1e9))
        session.context += sum(lengths)
        if session.context > MAX_TRACE_TOKENS:
            raise BadTrace(f"{where}: session {key!r}'s context reaches {session.context} tokens, over {MAX_TRACE_TOKENS}")
        session.turns.append((where, lengths, delay_ns))
    builder = Builder(
        "Mooncake sessions: one JSON object per line with session_id, timestamp or delay, input_length and output_length"
    )
    first_ms = next(iter(sessions.values())).arrival_ms if sessions else 0.0
    for k, session in enumerate(sessions.values()):
        for where, lengths, delay_ns in session.turns:
            builder.add((session.arrival_ms - first_ms) / 1e3, None, where, lengths, turn=(k, delay_ns))
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
