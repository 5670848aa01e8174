"""A language-model job's other workloads: empirical lengths, a shared prefix on a share of the requests, and uploaded
prompt sets (prompts, chats, multi-turn conversations, lengths), every prompt's length as the server will count it."""

from __future__ import annotations

import io
import json

import numpy as np
import orjson
import pytest
from pydantic import ValidationError

from benchfleet.generate.llmgen import LlamaSpec, generate
from common.formats import hfbundle
from common.formats.datasets import BadData, inspect_data
from common.formats.llmdata import BadPrompts, PromptRow, parse_lines
from common.spec.llm import LlmWorkload, SharedPrefix, TokenLengths
from follower.loadgen.llmprompts import PromptMaker, llm_bodies


@pytest.fixture(scope="module")
def maker() -> PromptMaker:
    data, _ = generate(LlamaSpec(layers=1, hidden=64, heads=2, kv_heads=2, intermediate=128, vocab=2048, context=512))
    return PromptMaker(*hfbundle.tokenizer_files(io.BytesIO(data), limit_bytes=10**8))


def test_empirical_lengths_are_drawn_only_from_the_observed_values(maker: PromptMaker) -> None:
    observed = [7, 7, 7, 30, 200]
    lengths = TokenLengths(dist="empirical", values=observed)
    assert lengths.upper == 200
    workload = LlmWorkload(prompt_tokens=lengths, output_tokens=TokenLengths(dist="empirical", values=[3, 9]))
    bodies, _, held, asked = llm_bodies(workload, "m", maker, 400, seed=2)
    docs = [orjson.loads(b) for b in bodies]
    assert set(held) == {7, 30, 200} and set(asked) == {3, 9}
    assert [maker.count(d["prompt"]) for d in docs] == list(held)
    assert 0.5 < float(np.mean(held == 7)) < 0.7  # 3 of the 5 observations
    with pytest.raises(ValidationError, match="empirical needs values"):
        TokenLengths(dist="empirical")
    with pytest.raises(ValidationError, match="only empirical takes them"):
        TokenLengths(dist="normal", mean=10, values=[1, 2])


@pytest.mark.parametrize("api", ["completions", "chat"])
def test_a_shared_prefix_starts_its_share_of_requests_and_counts_in_their_length(maker: PromptMaker, api: str) -> None:
    prefix = SharedPrefix(tokens=50, share=0.5, count=2)
    workload = LlmWorkload(api=api, prompt_tokens=TokenLengths(dist="uniform", min=10, max=40), output_tokens=4,
                           shared_prefix=prefix)  # fmt: skip
    assert workload.longest_prompt == 90
    bodies, _, held, _ = llm_bodies(workload, "m", maker, 300, seed=5)
    docs = [orjson.loads(b) for b in bodies]
    texts = [d["messages"][0]["content"] if api == "chat" else d["prompt"] for d in docs]
    counts = [maker.count_chat(t) if api == "chat" else maker.count(t) for t in texts]
    assert counts == list(held)  # exact, prefix included
    heads = [" ".join(t.split()[:50]) for t in texts]
    shared = {h for h in heads if heads.count(h) > 10}
    assert len(shared) == 2  # the two prefixes, each on many requests
    with_prefix = np.array([h in shared for h in heads])
    assert 0.4 < with_prefix.mean() < 0.6
    assert held[with_prefix].min() >= 60 and held[~with_prefix].max() <= 40  # 50 prefix tokens + 10..40 of its own


PROMPT_SET = "\n".join(json.dumps(row) for row in [
    {"prompt": "Tell me about the weather", "output_tokens": 5},
    {"prompt_tokens": 33},
    {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Why is the sky blue?"}]},
    {"conversation": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello there"},
                      {"role": "user", "content": "How are you"}], "output_tokens": 7},
]) + "\n"  # fmt: skip


def test_a_prompt_set_makes_one_request_per_row_and_per_conversation_turn(maker: PromptMaker) -> None:
    rows, kinds = parse_lines(io.StringIO(PROMPT_SET))
    assert kinds == ["messages", "prompt", "prompt_tokens"] and len(rows) == 5  # the conversation's 2 user turns
    assert rows[3].messages == (("user", "Hi"),) and rows[4].messages == (("user", "Hi"), ("assistant", "Hello there"),
                                                                          ("user", "How are you"))  # fmt: skip
    workload = LlmWorkload(api="chat", output_tokens=11, order="sequential", dataset="abc")
    bodies, _, held, asked = llm_bodies(workload, "m", maker, 10, seed=1, rows=rows)
    docs = [orjson.loads(b) for b in bodies]
    messages = [[(m["role"], m["content"]) for m in d["messages"]] for d in docs]
    assert messages[0] == [("user", "Tell me about the weather")] and messages[5] == messages[0]  # in order, cycling
    assert messages[4] == list(rows[4].messages or ())
    assert [maker.count_chat(m) for m in messages] == list(held)
    assert held[1] == 33 and list(asked[:5]) == [5, 11, 11, 7, 7]  # a row's own output length, else the drawn one
    assert inspect_data(io.BytesIO(PROMPT_SET.encode()), "prompts") == (5, kinds)


def test_a_prompt_set_for_completions_and_a_shared_prefix_before_its_text(maker: PromptMaker) -> None:
    rows = [PromptRow(prompt="The quick brown fox"), PromptRow(prompt_tokens=20, output_tokens=3)]
    workload = LlmWorkload(output_tokens=4, shared_prefix=SharedPrefix(tokens=12), dataset="abc")
    bodies, _, held, asked = llm_bodies(workload, "m", maker, 40, seed=3, rows=rows)
    docs = [orjson.loads(b) for b in bodies]
    assert [maker.count(d["prompt"]) for d in docs] == list(held)
    texts = [d["prompt"] for d in docs if d["prompt"].endswith("\nThe quick brown fox")]
    assert texts and len({t.split("\n")[0] for t in texts}) == 1  # one prefix, before the row's text
    assert {int(h) for h, a in zip(held, asked, strict=True) if a == 3} == {32}  # 12 prefix tokens + 20 built


@pytest.mark.parametrize(("line", "message"), [
    ('{"prompt": ""}', "line 1: prompt must be non-empty text"),
    ('{"prompt": "a", "messages": []}', "line 1: must hold exactly one of"),
    ('{"prompt_tokens": 0}', "line 1: prompt_tokens must be a whole number"),
    ('{"messages": [{"role": "robot", "content": "x"}]}', "line 1: messages[0] must be {role: system|user|assistant"),
    ('{"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}]}', "must end with a user"),
    ('{"conversation": [{"role": "assistant", "content": "y"}]}', "conversation has no user turn"),
    ('{"prompt": "a", "temperature": 2}', "unknown fields ['temperature']"),
    ("[1, 2]", "line 1: must be a JSON object"),
    ("{not json", "line 1 is not JSON"),
])  # fmt: skip
def test_a_bad_prompt_line_is_refused_naming_the_line(line: str, message: str) -> None:
    with pytest.raises(BadPrompts) as caught:
        parse_lines(io.StringIO(line + "\n"))
    assert message in str(caught.value)
    with pytest.raises(BadData):
        inspect_data(io.BytesIO(line.encode()), "prompts")
