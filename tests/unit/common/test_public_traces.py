"""The public LLM traces read as published (Mooncake, BurstGPT, Azure) and ShareGPT conversations: the repository's
sample files parse to what they say, and a bad entry is refused naming its line."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import numpy as np
import pytest

from common.formats.datasets import BadData, inspect_data
from common.formats.llmdata import BadPrompts, parse_lines
from common.formats.traces import BadTrace, parse_trace

SAMPLES = Path(__file__).resolve().parents[3] / "docs" / "traces"


def _trace(text: str):  # type: ignore[no-untyped-def]
    return parse_trace(io.BytesIO(text.encode()))


def test_the_mooncake_sample_gives_offsets_lengths_and_prefix_blocks() -> None:
    path = SAMPLES / "mooncake_trace.jsonl"
    entries = [json.loads(line) for line in path.read_text().splitlines()]
    trace = parse_trace(io.BytesIO(path.read_bytes()))
    assert trace.fields == ["hash_ids", "output_tokens", "prompt_tokens", "t"]
    # timestamp is milliseconds since the first request
    assert trace.offsets_ns.tolist() == [(e["timestamp"] - entries[0]["timestamp"]) * 1_000_000 for e in entries]
    assert trace.prompt_tokens.tolist() == [e["input_length"] for e in entries]
    assert trace.output_tokens.tolist() == [e["output_length"] for e in entries]
    assert trace.blocks == tuple(tuple(e["hash_ids"]) for e in entries)
    assert inspect_data(io.BytesIO(path.read_bytes()), "trace") == (len(entries), trace.fields)


def test_a_mooncake_trace_that_starts_late_is_moved_to_the_runs_start() -> None:
    trace = _trace(
        '{"timestamp": 27482, "input_length": 655, "output_length": 52, "hash_ids": [46, 47]}\n'
        '{"timestamp": 37482.5, "input_length": 672, "output_length": 26, "hash_ids": [46, 47]}\n'
    )
    assert trace.offsets_ns.tolist() == [0, 10_000_500_000] and trace.blocks == ((46, 47), (46, 47))


def test_the_burstgpt_and_azure_samples_give_offsets_and_lengths() -> None:
    burst = (SAMPLES / "BurstGPT_sample.csv").read_text().splitlines()[1:]
    trace = parse_trace(io.BytesIO((SAMPLES / "BurstGPT_sample.csv").read_bytes()))
    rows = [r.split(",") for r in burst]
    assert trace.fields == ["output_tokens", "prompt_tokens", "t"] and trace.blocks is None
    assert trace.offsets_ns.tolist() == [round((float(r[0]) - float(rows[0][0])) * 1e9) for r in rows]
    assert (trace.prompt_tokens.tolist(), trace.output_tokens.tolist()) == ([int(r[2]) for r in rows], [int(r[3]) for r in rows])
    azure = parse_trace(io.BytesIO((SAMPLES / "AzureLLMInferenceTrace_sample.csv").read_bytes()))
    lines = (SAMPLES / "AzureLLMInferenceTrace_sample.csv").read_text().splitlines()
    assert len(azure) == len(lines) - 1 and azure.offsets_ns[0] == 0
    # 18:15:46.8676340 then 18:15:47.1578990: 290.265 ms apart (the seventh digit, 100 ns, is kept to the microsecond)
    assert lines[1].startswith("2023-11-16 18:15:46.8676340") and lines[2].startswith("2023-11-16 18:15:47.1578990")
    assert int(azure.offsets_ns[1]) == 290_265_000
    assert azure.prompt_tokens[0] == 84 and azure.output_tokens[0] == 24
    assert np.all(np.diff(azure.offsets_ns) >= 0)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            '{"timestamp": 0, "input_length": 9, "output_length": 2, "hash_ids": [1]}\n{"timestamp": 5, "input_length": 9}\n',
            "line 2: a Mooncake entry needs output_length",
        ),
        (
            '{"timestamp": 0, "input_length": 9, "output_length": 2, "hash_ids": [1]}\n'
            '{"timestamp": 5, "input_length": 9, "output_length": 2, "hash_ids": [1, -4]}\n',
            "line 2: hash_ids must be a whole number in 0..9007199254740991, got -4",
        ),
        (
            '{"timestamp": 0, "input_length": 9, "output_length": 2, "hash_ids": []}\n',
            "line 1: hash_ids must be a non-empty list",
        ),
        (
            '{"timestamp": 0, "input_length": 9, "output_length": 2, "hash_ids": [1]}\n'
            '{"timestamp": 5, "input_length": 9, "output_length": 2}\n',
            "line 2: either every entry gives hash_ids or none does",
        ),
        (
            '{"timestamp": 0, "input_length": 9, "output_length": 2}\n{"timestamp": 9, "input_length": 9, "output_length": 2}\n'
            '{"timestamp": 5, "input_length": 9, "output_length": 2}\n',
            "line 3: offset 0.005 s is earlier than the one before (0.009 s)",
        ),
        ('{"timestamp": "0", "input_length": 9, "output_length": 2}\n', "line 1: timestamp must be a number of milliseconds"),
        ('{"timestamp": 0, "input_length": 0, "output_length": 2}\n', "line 1: input_length must be a whole number in 1..131072"),
        (
            "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n5,ChatGPT,472,18,490,Conversation log\n"
            "6,ChatGPT,300,0,300,Conversation log\n",
            "line 3: 0 Response tokens is a failed request in the recording",
        ),
        (
            "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n5,ChatGPT,472,18,490\n",
            "line 2 has 5 columns, BurstGPT's header has 6",
        ),
        (
            "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\nsoon,ChatGPT,472,18,490,API log\n",
            "line 2: Timestamp 'soon' is not a number",
        ),
        (
            "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44\nyesterday,10,2\n",
            "line 3: TIMESTAMP 'yesterday' is not a date and time",
        ),
        (
            "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,forty\n",
            "line 2: GeneratedTokens must be a whole number in 1..131072, got 'forty'",
        ),
        ("TIMESTAMP,ContextTokens,GeneratedTokens\n", "no entries (Azure LLM inference trace: TIMESTAMP,ContextTokens"),
    ],
)
def test_a_bad_public_trace_entry_is_refused_naming_its_line(text: str, message: str) -> None:
    with pytest.raises(BadTrace, match="^" + re.escape(message)):
        _trace(text)
    with pytest.raises(BadData, match="^" + re.escape(message.split(":")[0])):
        inspect_data(io.BytesIO(text.encode()), "trace")


def test_the_sharegpt_sample_is_a_prompt_set_of_conversations() -> None:
    path = SAMPLES / "sharegpt_sample.json"
    conversations = json.loads(path.read_text())
    rows, kinds = parse_lines(io.StringIO(path.read_text()))
    assert kinds == ["messages"]
    # one request per human turn, carrying everything before it with the recorded replies
    humans = [k for c in conversations for k, turn in enumerate(c["conversations"]) if turn["from"] == "human"]
    assert len(rows) == len(humans) == 6
    third = conversations[2]["conversations"]
    role = {"human": "user", "gpt": "assistant", "system": "system"}
    assert rows[-1].messages == tuple((role[t["from"]], t["value"]) for t in third)
    assert rows[2].messages == (
        ("system", "You answer in one sentence."),
        ("user", conversations[1]["conversations"][1]["value"]),
    )
    # the same conversations as JSON lines read alike
    as_lines = "".join(json.dumps(c) + "\n" for c in conversations)
    assert parse_lines(io.StringIO(as_lines)) == (rows, kinds)
    assert inspect_data(io.BytesIO(path.read_bytes()), "prompts") == (6, ["messages"])


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda c: c[1]["conversations"][2].update({"from": "robot"}), r"^line 15: conversations\[2\] must be \{from: human"),
        (lambda c: c[2]["conversations"][0].update({"value": ""}), r"^line 32: conversations\[0\]\.value must be non-empty text"),
        (lambda c: c[0].update({"conversations": []}), r"^line 2: conversations must be a list of 1\.\.256 turns"),
    ],
)
def test_a_bad_sharegpt_conversation_is_refused_naming_the_line_it_starts_on(edit, message: str) -> None:  # type: ignore[no-untyped-def]
    conversations = [
        {"id": "a", "conversations": [{"from": "human", "value": "q"}, {"from": "gpt", "value": "a"}]},
        {
            "id": "b",
            "conversations": [{"from": "human", "value": "q"}, {"from": "gpt", "value": "a"}, {"from": "human", "value": "r"}],
        },
        {"id": "c", "conversations": [{"from": "human", "value": "q"}]},
    ]
    edit(conversations)
    text = "[\n" + ",\n".join(json.dumps(c, indent=1) for c in conversations) + "\n]\n"
    with pytest.raises(BadPrompts, match=message):
        parse_lines(io.StringIO(text))


def test_a_sharegpt_array_cut_short_is_refused() -> None:
    text = json.dumps([{"conversations": [{"from": "human", "value": "q"}]}] * 2, indent=2)
    with pytest.raises(BadPrompts, match="not closed by ]"):
        parse_lines(io.StringIO(text[:-1]))
    with pytest.raises(BadPrompts, match="line 10: expected , or ]"):
        parse_lines(io.StringIO(text.replace("},\n  {", "}\n  {", 1)))
