"""Session traces (Mooncake lines with session_id, AIPerf's multi-turn extension): the repository's sample parses to
its sessions (each turn at its session's arrival, with its lengths and the pause before it), interleaved sessions
read as the same sessions, and a bad entry is refused naming its line."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import numpy as np
import pytest

from common.formats.datasets import BadData, inspect_data
from common.formats.traces import BadTrace, parse_trace

SAMPLE = Path(__file__).resolve().parents[3] / "docs" / "traces" / "mooncake_sessions.jsonl"


def _trace(lines: list[dict[str, object]]):  # type: ignore[no-untyped-def]
    return parse_trace(io.BytesIO("".join(json.dumps(line) + "\n" for line in lines).encode()))


def test_the_session_sample_gives_each_sessions_arrival_turns_lengths_and_pauses() -> None:
    entries = [json.loads(line) for line in SAMPLE.read_text().splitlines()]
    trace = parse_trace(io.BytesIO(SAMPLE.read_bytes()))
    assert trace.fields == ["output_tokens", "prompt_tokens", "session_id", "t"]
    ids = list(dict.fromkeys(e["session_id"] for e in entries))
    assert trace.sessions == len(ids) == 6 and len(trace) == len(entries)
    # The sample lists each session's turns together: the entries keep the file's order.
    assert trace.session_of.tolist() == [ids.index(e["session_id"]) for e in entries]
    arrival = {e["session_id"]: e["timestamp"] for e in entries if "timestamp" in e}
    assert trace.offsets_ns.tolist() == [arrival[e["session_id"]] * 1_000_000 for e in entries]
    assert trace.delay_ns.tolist() == [e.get("delay", 0) * 1_000_000 for e in entries]
    assert trace.prompt_tokens.tolist() == [e["input_length"] for e in entries]
    assert trace.output_tokens.tolist() == [e["output_length"] for e in entries]
    turns = np.bincount(trace.session_of)
    assert turns.min() >= 5 and turns.max() <= 20
    assert inspect_data(io.BytesIO(SAMPLE.read_bytes()), "trace") == (len(entries), trace.fields)


def test_interleaved_sessions_read_as_the_same_sessions_and_a_run_keeps_whole_sessions() -> None:
    a0 = {"session_id": "a", "timestamp": 1000, "input_length": 20, "output_length": 4}
    b0 = {"session_id": 7, "timestamp": 1500, "input_length": 16, "output_length": 3}
    a1 = {"session_id": "a", "delay": 250.5, "input_length": 8, "output_length": 5}
    b1 = {"session_id": 7, "input_length": 6, "output_length": 2}  # no delay: the next turn at once
    trace = _trace([a0, b0, a1, b1])
    assert trace.session_of.tolist() == [0, 0, 1, 1]
    assert trace.offsets_ns.tolist() == [0, 0, 500_000_000, 500_000_000]
    assert trace.delay_ns.tolist() == [0, 250_500_000, 0, 0]
    assert (trace.prompt_tokens.tolist(), trace.output_tokens.tolist()) == ([20, 8, 16, 6], [4, 5, 3, 2])
    grouped = _trace([a0, a1, b0, b1])
    for name in ("offsets_ns", "session_of", "delay_ns", "prompt_tokens", "output_tokens"):
        assert np.array_equal(getattr(trace, name), getattr(grouped, name)), name
    # A run shorter than the second arrival replays the first session whole; a warm-up before it numbers on.
    first = trace.within(0.4)
    assert (first.sessions, len(first)) == (1, 2)
    assert trace.within(0.4).then(trace, 400_000_000).session_of.tolist() == [0, 0, 1, 1, 2, 2]


FIRST = {"session_id": "s", "timestamp": 0, "input_length": 9, "output_length": 2}


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        ([FIRST, {"timestamp": 5, "input_length": 9, "output_length": 2}], "line 2: either every entry gives a session_id"),
        ([{**FIRST, "session_id": ""}], "line 1: session_id must be a string of 1..256 characters"),
        ([{**FIRST, "session_id": ["s"]}], "line 1: session_id must be a string of 1..256 characters"),
        ([{**FIRST, "delay": 5}], "line 1: session 's' starts here: its first turn gives a timestamp (ms), not a delay"),
        (
            [FIRST, {"session_id": "t", "delay": 5, "input_length": 9, "output_length": 2}],
            "line 2: session 't' starts here: its first turn gives a timestamp",
        ),
        (
            [FIRST, {**FIRST, "timestamp": 40}],
            "line 2: a later turn of session 's' is due its delay (ms) after the answer before it, not at a timestamp",
        ),
        ([FIRST, {"session_id": "s", "delay": -1, "input_length": 9, "output_length": 2}], "line 2: delay -1 ms must be"),
        ([FIRST, {"session_id": "s", "delay": 600_001, "input_length": 9, "output_length": 2}], "line 2: delay 600001 ms"),
        ([FIRST, {"session_id": "s", "delay": "soon", "input_length": 9, "output_length": 2}], "line 2: delay must be"),
        ([FIRST, {"session_id": "s", "delay": 5, "input_length": 9}], "line 2: a Mooncake entry needs output_length"),
        ([{**FIRST, "hash_ids": [1, 2]}], "line 1: hash_ids with a session_id"),
        ([FIRST, {**FIRST, "session_id": "t", "timestamp": -5}], "line 2: offset -0.005 must be a finite number of seconds >= 0"),
        (
            [{**FIRST, "timestamp": 9}, {**FIRST, "session_id": "t", "timestamp": 5}],
            "line 2: offset -0.004 must be a finite number of seconds >= 0",
        ),
        (
            [FIRST, {**FIRST, "session_id": "t", "timestamp": 9}, {**FIRST, "session_id": "u", "timestamp": 5}],
            "line 3: offset 0.005 s is earlier than the one before (0.009 s)",
        ),
        (
            [FIRST, *[{"session_id": "s", "delay": 1, "input_length": 1, "output_length": 1}] * 64],
            "line 65: session 's' has more than 64 turns",
        ),
        (
            [FIRST, *[{"session_id": "s", "delay": 1, "input_length": 60_000, "output_length": 10_000}] * 2],
            "line 3: session 's''s context reaches 140011 tokens, over 131072",
        ),
    ],
)
def test_a_bad_session_trace_entry_is_refused_naming_its_line(lines: list[dict[str, object]], message: str) -> None:
    with pytest.raises(BadTrace, match="^" + re.escape(message)):
        _trace(lines)
    text = "".join(json.dumps(line) + "\n" for line in lines).encode()
    with pytest.raises(BadData, match="^" + re.escape(message.split(":")[0])):
        inspect_data(io.BytesIO(text), "trace")
