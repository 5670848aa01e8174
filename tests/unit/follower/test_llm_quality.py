"""A language model's quality checks (follower/point/llmquality.py): the evaluation scorers, greedy agreement of
completions token by token, the greedy requests sent, the tokens read from each server's answer shape, and evaluation
sets (prompt sets with answers) checked at upload. The checks against a real llama.cpp are tests/e2e/test_llm_quality.py."""

from __future__ import annotations

import io

import orjson
import pytest

from benchfleet.generate.llmgen import LlamaSpec, generate
from common.formats import hfbundle
from common.formats.llmdata import ANSWER, BadPrompts, PromptRow, parse_lines
from common.spec.llm import LlmWorkload, SharedPrefix
from follower.loadgen.llmprompts import PromptMaker
from follower.point.llmquality import _tokens, agreement_of, normalise, quality_bodies, score


@pytest.fixture(scope="module")
def maker() -> PromptMaker:
    data, _ = generate(LlamaSpec(layers=1, hidden=64, heads=2, kv_heads=2, intermediate=128, vocab=2048, context=512))
    return PromptMaker(*hfbundle.tokenizer_files(io.BytesIO(data), limit_bytes=10**8))


@pytest.mark.parametrize(
    ("scorer", "completion", "answer", "correct"),
    [
        ("exact", '  "Paris."\n', "paris", True),
        ("exact", "Paris is the capital", "Paris", False),
        ("exact", "New   York", "new york", True),
        ("contains", "I think it is Paris, France.", "paris", True),
        ("contains", "Lyon", "Paris", False),
        ("choice", "(B) because", "B", True),
        ("choice", "Answer: C.", "c", True),
        ("choice", "Because A is wrong", "B", False),  # "Because" is a word, not the letter B; A comes first
        ("choice", "no letter here", "A", False),
        ("choice", "I think the answer is B", "B", True),  # the pronoun I is not the choice
        ("choice", "I would pick (D), not C", "D", True),
        ("choice", "I", "I", True),
        ("number", "3 apples and 4 pears: 7", "7", True),  # the last number said
        ("number", "it costs 1,234.50 dollars", "1234.5", True),
        ("number", "7 of them, then 8", "7", False),
        ("number", "none", "0", False),
    ],
)
def test_each_scorer_reads_the_completion_as_documented(scorer: str, completion: str, answer: str, correct: bool) -> None:
    assert score(scorer, completion, answer) is correct  # type: ignore[arg-type]


def test_normalising_collapses_space_and_strips_surrounding_punctuation() -> None:
    assert normalise(" 'The  END!'\n") == "the end"


def test_agreement_counts_identical_completions_matched_tokens_and_the_first_difference() -> None:
    reference = [["a", "b", "c", "d"], ["x", "y"], ["p", "q", "r"]]
    answers = [["a", "b", "c", "d"], ["x", "z"], ["p", "q"]]  # the same; differs at 1; a prefix: differs at its end (2)
    agreed = agreement_of(answers, reference, "llamacpp llm.dtype=float32")
    assert (agreed.exact.hits, agreed.exact.samples, agreed.differing) == (1, 3, 2)
    assert agreed.tokens is not None and (agreed.tokens.hits, agreed.tokens.samples) == (4 + 1 + 2, 9)
    assert agreed.first_difference == pytest.approx((1 + 2) / 2)
    same = agreement_of(reference, reference, "ref")
    assert (same.exact.value, same.first_difference, same.differing) == (1.0, None, 0)
    assert same.exact.low < 1.0 == same.exact.high  # three samples: a wide interval, not a certainty


def test_greedy_requests_take_the_rows_in_order_without_prefix_stream_or_forced_length(maker: PromptMaker) -> None:
    rows = [PromptRow(prompt=f"question {i}", output_tokens=500, answer=str(i)) for i in range(5)]
    workload = LlmWorkload(order="random", shared_prefix=SharedPrefix(tokens=8, share=1.0), ignore_eos=True)
    bodies = [orjson.loads(b) for b in quality_bodies(workload, "m", maker, rows, 3, 16)]
    assert [b["prompt"] for b in bodies] == ["question 0", "question 1", "question 2"]
    for body in bodies:
        assert (body["temperature"], body["max_tokens"], body["stream"], body["logprobs"]) == (0, 16, False, 1)
        assert "ignore_eos" not in body and "min_tokens" not in body and "stream_options" not in body
    chat = LlmWorkload(api="chat")
    built = [orjson.loads(b) for b in quality_bodies(chat, "m", maker, None, 4, 8)]
    again = [orjson.loads(b) for b in quality_bodies(chat, "m", maker, None, 4, 8)]
    assert built == again and len({str(b["messages"]) for b in built}) == 4  # the same prompts for every configuration
    assert all(b["logprobs"] is True for b in built)


def test_the_generated_tokens_are_read_from_either_servers_logprobs() -> None:
    llamacpp = {"text": " ab", "logprobs": {"content": [{"id": 5, "token": " a", "logprob": -1.0}, {"id": 6, "token": "b"}]}}
    vllm = {"text": " ab", "logprobs": {"tokens": [" a", "b"], "token_logprobs": [-1.0, -2.0]}}
    assert _tokens(llamacpp) == _tokens(vllm) == [" a", "b"]
    assert _tokens({"text": "x"}) is None and _tokens({"logprobs": {"content": [{"id": 1}]}}) is None


def test_an_evaluation_set_answers_every_row_or_none() -> None:
    rows, kinds = parse_lines(
        io.StringIO('{"prompt": "2+2=", "answer": 4}\n{"messages": [{"role": "user", "content": "Hi"}], "answer": "B"}\n')
    )
    assert [r.answer for r in rows] == ["4", "B"] and kinds == ["messages", "prompt", ANSWER]
    assert parse_lines(io.StringIO('{"prompt": "x"}\n'))[1] == ["prompt"]
    for text, needle in [
        ('{"prompt": "a", "answer": "1"}\n{"prompt": "b"}\n', "line 2: has no answer, while other rows have one"),
        ('{"prompt_tokens": 5, "answer": "1"}\n', "line 1: an answer goes with a prompt or messages row"),
        ('{"prompt": "a", "answer": ""}\n', "line 1: answer must be a number or non-empty text"),
        ('{"prompt": "a", "answer": true}\n', "line 1: answer must be a number or non-empty text"),
    ]:
        with pytest.raises(BadPrompts, match=needle):
            parse_lines(io.StringIO(text))
