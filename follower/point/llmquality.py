"""A language model's quality checks (`quality:` on an LLM job) on the point's own server, after its load.

Each check sends prompts one at a time, greedily (temperature 0, at most `answer_tokens` tokens, no `ignore_eos`: the
model may stop at its end), through the job's own API (completions or chat), and reads the completion's text:

- **evaluation**: the job's prompt set (llm.dataset) with an answer on every row, its first `max_samples` rows in order;
  each completion scored against its row's answer by the scorer the job names (`scorers` below). The share correct is
  the point's accuracy, with its 95% Wilson interval, so the leaderboard, compare and the recommender's floor read it as
  they read a tensor model's.
- **agreement**: the same prompts (the evaluation set's, else the prompt set's, else prompts built as the load's are,
  from a fixed seed) against the job's first configuration's completions (its reference): each completion as the
  tokens the server says it generated (its `logprobs`; a server that gives none: the model's own tokenizer on the
  text, which may split it otherwise), the share identical, the share of the reference's tokens matched at their
  position, and the mean position of the first differing token.

Greedy answers do not depend on the load, so a configuration is checked once per attempt, after its first point; its
later points carry those figures and say which point they are from (`from_point`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import re
import time
from collections.abc import Sequence

import orjson

from common.formats.llmdata import PromptRow
from common.spec.job import PointSpec
from common.spec.llm import LlmWorkload, TokenLengths
from common.spec.quality import QualitySpec, Scorer
from common.wire.quality import Accuracy, CompletionAgreement, Quality
from common.wire.results import PointResult
from follower.loadgen.llmprompts import PromptMaker, llm_bodies
from follower.point.context import PointContext
from follower.point.quality import reference_label, share
from follower.protocols import PROTOCOLS, Credentials, EndpointError, session
from follower.protocols.calls import post_json

QUALITY_SEED = 0  # the built prompts' seed: every configuration and point of a job gets the same prompts
# How long one greedy answer may take: a minute, and half a second a token asked (a big model on a CPU is slow).
ANSWER_TIMEOUT_S, ANSWER_TIMEOUT_PER_TOKEN_S = 60.0, 0.5
_SPACE = re.compile(r"\s+")
_EDGES = " \t\n.,;:!?\"'`()[]{}*"
_CHOICE = re.compile(r"(?<![A-Za-z])([A-J])(?![A-Za-z])")
# Where a completion names its choice: "the answer is (B)", "Answer: B"; else "(B)"; else its first standalone letter
# (so "I think the answer is B" is B, not the pronoun).
_CHOICE_SAID = (
    re.compile(r"answer(?:\s+is)?\s*[:\-]?\s*\(?([A-J])(?![A-Za-z])", re.IGNORECASE),
    re.compile(r"\(([A-J])\)"),
    _CHOICE,
)
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?|-?\.\d+")


def normalise(text: str) -> str:
    """Lower-cased, whitespace collapsed to single spaces, surrounding punctuation and quotes stripped."""
    return _SPACE.sub(" ", text.lower()).strip(_EDGES)


def _number(text: str, last: bool) -> float | None:
    found = _NUMBER.findall(text)
    if not found:
        return None
    try:
        return float(found[-1 if last else 0].replace(",", ""))
    except ValueError:
        return None


def score(scorer: Scorer, completion: str, answer: str) -> bool:
    """Whether `completion` says `answer`, by `scorer` (common.spec.quality.EvaluationSpec says each)."""
    if scorer == "exact":
        return normalise(completion) == normalise(answer)
    if scorer == "contains":
        return normalise(answer) in normalise(completion)
    if scorer == "choice":
        said = next((m.group(1) for pattern in _CHOICE_SAID if (m := pattern.search(completion))), None)
        wanted = _CHOICE.search(answer.strip().upper())
        return said is not None and wanted is not None and said == wanted.group(1)
    said_n, wanted_n = _number(completion, last=True), _number(answer, last=False)
    return said_n is not None and wanted_n is not None and math.isclose(said_n, wanted_n, rel_tol=1e-6, abs_tol=1e-12)


def agreement_of(
    answers: Sequence[Sequence[str]], reference: Sequence[Sequence[str]], label: str, *, tokens_from: str = "server"
) -> CompletionAgreement:
    """Completions (their tokens) against the reference's to the same prompts, pairwise."""
    n = min(len(answers), len(reference))
    identical = matched = total = 0
    firsts: list[int] = []
    for got, ref in zip(answers[:n], reference[:n], strict=True):
        total += len(ref)
        matched += sum(a == b for a, b in zip(got, ref, strict=False))
        if list(got) == list(ref):
            identical += 1
        else:
            firsts.append(next((i for i, (a, b) in enumerate(zip(got, ref, strict=False)) if a != b), min(len(got), len(ref))))
    return CompletionAgreement(
        reference=label,
        exact=share(identical, n),
        tokens=share(matched, total) if total else None,
        first_difference=sum(firsts) / len(firsts) if firsts else None,
        differing=len(firsts),
        tokens_from=tokens_from,
    )


def quality_bodies(
    workload: LlmWorkload, model_name: str, maker: PromptMaker, rows: Sequence[PromptRow] | None, n: int, tokens: int
) -> list[bytes]:
    """`n` greedy requests of at most `tokens` tokens: the first `n` rows in order (or prompts built as the load's are,
    from QUALITY_SEED), with no shared prefix and no streaming."""
    greedy = workload.model_copy(
        update={
            "stream": False,
            "ignore_eos": False,
            "order": "sequential",
            "shared_prefix": None,
            "usage_per_event": False,
            "output_tokens": TokenLengths(mean=tokens),
        }
    )
    taken = [dataclasses.replace(r, output_tokens=None) for r in rows[:n]] if rows else None
    bodies, _, _, _ = llm_bodies(greedy, model_name, maker, n, QUALITY_SEED, taken)
    # The generated tokens as the server names them: completions' `logprobs` is a count, chat's a switch.
    ask = {"temperature": 0, "logprobs": True} if workload.api == "chat" else {"temperature": 0, "logprobs": 1}
    return [orjson.dumps(orjson.loads(body) | ask) for body in bodies]


@dataclasses.dataclass(frozen=True)
class Completion:
    """One greedy answer: its text, and its tokens as the server named them (None: it named none)."""

    text: str
    tokens: list[str] | None


def _tokens(choice: dict[str, object]) -> list[str] | None:
    """The generated tokens of an answer's `logprobs`: chat's (and llama.cpp's) `content`, or completions' `tokens`."""
    logprobs = choice.get("logprobs")
    if not isinstance(logprobs, dict):
        return None
    content, tokens = logprobs.get("content"), logprobs.get("tokens")
    if isinstance(content, list) and all(isinstance(c, dict) and isinstance(c.get("token"), str) for c in content):
        return [c["token"] for c in content]
    if isinstance(tokens, list) and all(isinstance(t, str) for t in tokens):
        return list(tokens)
    return None


def completions(url: str, bodies: Sequence[bytes], credentials: Credentials, *, tokens: int) -> list[Completion] | str:
    """Each body's completion (of at most `tokens` tokens), or why they cannot be had."""
    out: list[Completion] = []
    timeout_s = ANSWER_TIMEOUT_S + ANSWER_TIMEOUT_PER_TOKEN_S * tokens
    with session(credentials):
        for body in bodies:
            try:
                answer = post_json(url, body, credentials, timeout_s=timeout_s)
            except EndpointError as exc:
                return f"the server did not answer ({exc})"
            try:
                choice = answer["choices"][0]
                text = choice["message"]["content"] if "message" in choice else choice["text"]
            except (KeyError, IndexError, TypeError):
                return "an answer held no completion text (choices[0].text or choices[0].message.content)"
            out.append(Completion(text if isinstance(text, str) else "", _tokens(choice) if isinstance(choice, dict) else None))
    return out


async def with_llm_quality(result: PointResult, point: PointSpec, ctx: PointContext) -> PointResult:
    """The point's result with its language-model quality figures, when the job asks for them."""
    spec: QualitySpec | None = ctx.run.quality
    workload = point.llm
    if spec is None or workload is None or (ctx.run.shard is not None and ctx.run.shard.index != 0):
        return result
    key = f"{point.backend} {point.server.model_dump_json()}"
    if (done := ctx.run.llm_quality.get(key)) is not None:
        return result.model_copy(update={"quality": done})
    quality = (await asyncio.to_thread(_check, spec, workload, point, ctx)).held_to(spec.min_accuracy)
    if quality.accuracy is not None or quality.completions is not None:  # a server that did not answer is asked again
        ctx.run.llm_quality[key] = quality.model_copy(update={"from_point": point.index})
    return result.model_copy(update={"quality": quality})


def _check(spec: QualitySpec, workload: LlmWorkload, point: PointSpec, ctx: PointContext) -> Quality:
    started = time.perf_counter()
    rows, maker = ctx.run.prompt_rows, ctx.prompts
    if maker is None:
        return Quality(not_run=["quality: the model's tokenizer is not at hand"], seconds=0.0)
    n = min(spec.samples("llm"), len(rows)) if rows else spec.samples("llm")
    bodies = quality_bodies(workload, ctx.run.model.name, maker, rows, n, spec.answer_tokens)
    protocol = PROTOCOLS[ctx.endpoint.protocol]
    url = protocol.infer_url(protocol.route(ctx.endpoint, workload))
    said = completions(url, bodies, ctx.run.credentials, tokens=spec.answer_tokens)
    if isinstance(said, str):
        checks = [name for name, asked in (("evaluation", spec.evaluation), ("agreement", spec.agreement)) if asked]
        return Quality(not_run=[f"{c}: {said}" for c in checks], seconds=time.perf_counter() - started)
    accuracy: Accuracy | None = None
    agreement: CompletionAgreement | None = None
    not_run: list[str] = []
    if spec.evaluation is not None:
        answers = [r.answer for r in (rows or [])[:n]]
        if not answers or any(a is None for a in answers):
            not_run.append("evaluation: the prompt set has no answer on every row")
        else:
            hits = sum(score(spec.evaluation.scorer, c.text, str(a)) for c, a in zip(said, answers, strict=True))
            accuracy = Accuracy(top1=share(hits, n), k=1, scorer=spec.evaluation.scorer)
    if spec.agreement:
        named = all(c.tokens is not None for c in said)
        tokens = [c.tokens if c.tokens is not None else _split(maker, c.text) for c in said]
        agreed = _agreement(tokens, "server" if named else "tokenizer", point, ctx)
        agreement, not_run = (None, [*not_run, agreed]) if isinstance(agreed, str) else (agreed, not_run)
    return Quality(accuracy=accuracy, completions=agreement, not_run=not_run, seconds=time.perf_counter() - started)


def _split(maker: PromptMaker, text: str) -> list[str]:
    """Generated text as the model's tokenizer splits it (for a server that names no tokens)."""
    ids = maker.tokenizer.encode(text, add_special_tokens=False).ids
    return [maker.tokenizer.decode([i], skip_special_tokens=False) for i in ids]


def _agreement(tokens: list[list[str]], source: str, point: PointSpec, ctx: PointContext) -> CompletionAgreement | str:
    """The completions against the reference configuration's (a point of the reference keeps its own as the reference)."""
    if ctx.run.reference is None:
        return "agreement: no reference configuration"
    backend, server = ctx.run.reference
    label = reference_label(backend, server)
    if (point.backend, point.server) == (backend, server) and not ctx.run.reference_tokens:
        ctx.run.reference_tokens.extend(tokens)
    if not ctx.run.reference_tokens:
        return f"agreement: the reference configuration ({label}) has no completions on this follower"
    return agreement_of(tokens, ctx.run.reference_tokens, label, tokens_from=source)
