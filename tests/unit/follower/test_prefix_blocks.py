"""A replayed Mooncake trace's prompts share exactly the prefixes its hash_ids say, on the bytes sent: two requests
whose ids agree up to block k start with the same k blocks of tokens and differ from there; scrambled ids share
nothing. Each prompt is the entry's input_length as the model's tokenizer counts it, in either API."""

from __future__ import annotations

import io
import json
from pathlib import Path

import orjson
import pytest

from benchfleet.generate.llmgen import LlamaSpec, generate
from common.formats import hfbundle
from common.formats.traces import Trace, parse_trace
from common.spec.llm import LlmWorkload
from follower.loadgen.llmprompts import PromptMaker, llm_bodies, trace_rows
from follower.point.plan import trace_schedule

SAMPLE = Path(__file__).resolve().parents[3] / "docs" / "traces" / "mooncake_trace.jsonl"
BLOCK = 32  # the sample's block size (docs/traces/README.md)


@pytest.fixture(scope="module")
def maker() -> PromptMaker:
    data, _ = generate(LlamaSpec(layers=1, hidden=64, heads=2, kv_heads=2, intermediate=128, vocab=2048, context=512))
    return PromptMaker(*hfbundle.tokenizer_files(io.BytesIO(data), limit_bytes=10**8))


def _sent(maker: PromptMaker, trace: Trace, api: str) -> tuple[list[list[str]], list[int]]:
    """Each request's prompt words as sent (its body's bytes), and its length as the tokenizer counts it."""
    workload = LlmWorkload(api=api, order="sequential")  # type: ignore[arg-type]
    rows = trace_rows(trace, BLOCK)
    bodies, _, held, asked = llm_bodies(workload, "m", maker, len(trace), seed=11, rows=rows)
    assert asked.tolist() == trace.output_tokens.tolist()  # type: ignore[union-attr]
    docs = [orjson.loads(b) for b in bodies]
    texts = [d["prompt"] if api == "completions" else d["messages"][0]["content"] for d in docs]
    counted = [maker.count(t) if api == "completions" else maker.count_chat(t) for t in texts]
    assert counted == held.tolist()
    return [(" " + t.lstrip()).split(" ")[1:] for t in texts], counted


def _common(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    k = 0
    while k < min(len(a), len(b)) and a[k] == b[k]:
        k += 1
    return k


@pytest.mark.parametrize("api", ["completions", "chat"])
def test_prompts_share_exactly_the_blocks_their_hash_ids_share(maker: PromptMaker, api: str) -> None:
    trace = parse_trace(io.BytesIO(SAMPLE.read_bytes()))
    assert trace.blocks is not None
    words, counted = _sent(maker, trace, api)
    assert counted == trace.prompt_tokens.tolist()  # type: ignore[union-attr]
    pairs = 0
    for i in range(len(trace)):
        for j in range(i + 1, len(trace)):
            shared = _common(trace.blocks[i], trace.blocks[j]) * BLOCK
            a, b = words[i], words[j]
            end = min(shared, len(a), len(b))
            assert a[:end] == b[:end], (i, j)
            if shared < min(len(a), len(b)):
                # the next block is another id's: a different run of words from there
                step = min(len(a), len(b), shared + BLOCK)
                assert a[shared:step] != b[shared:step], (i, j)
            pairs += shared > 0
    assert pairs >= 100  # the sample's requests all share its 3-block system prompt, and each conversation its history


def test_scrambled_hash_ids_share_nothing_and_a_replay_is_the_same_bytes(maker: PromptMaker) -> None:
    lines = [json.loads(line) for line in SAMPLE.read_text().splitlines()]
    scrambled = "".join(
        json.dumps(e | {"hash_ids": [10_000 + 100 * n + k for k in range(len(e["hash_ids"]))]}) + "\n"
        for n, e in enumerate(lines)
    )
    trace = parse_trace(io.BytesIO(scrambled.encode()))
    words, _ = _sent(maker, trace, "completions")
    firsts = {tuple(w[:BLOCK]) for w in words}
    assert len(firsts) == len(words)
    # The same trace replayed twice: the same arrivals, lengths and prompts.
    original = parse_trace(io.BytesIO(SAMPLE.read_bytes()))
    once, twice = trace_schedule(original, 1.0, 10.0), trace_schedule(original, 1.0, 10.0)
    assert once.offsets_ns.tolist() == twice.offsets_ns.tolist() and once.blocks == twice.blocks
    assert _sent(maker, original, "completions") == _sent(maker, original, "completions")
