"""Uploaded prompt sets for language-model jobs: the `prompts` data format (JSON lines) and its rows.

Each line is one object of one of these kinds, with an optional `output_tokens` (the length to ask for; else the job's
`output_tokens` distribution draws it):
  {"prompt": "text"}                                   a completion prompt (or one user message under api: chat)
  {"messages": [{"role": "user", "content": "..."}]}   one chat request (api: chat)
  {"conversation": [{"role": "user", ...}, {"role": "assistant", ...}, ...]}
                                                       a multi-turn conversation (api: chat): one request per user
                                                       turn, each carrying the turns before it with the recorded replies
  {"prompt_tokens": 512}                               a length only: the follower builds an exact prompt of it (an
                                                       empirical length distribution from a file)
  {"conversations": [{"from": "human", "value": "..."}, {"from": "gpt", "value": "..."}, ...]}
                                                       a ShareGPT-style conversation (its `id` and other fields
                                                       ignored; human/user, gpt/chatgpt/bard/bing/assistant/model and
                                                       system speak): read as a conversation
A whole file that is one JSON array of ShareGPT conversations (as ShareGPT's dumps are published) is read too, each
error naming the line its conversation starts on.
A `prompt` or `messages` row may carry an `answer` (text or a number): what a correct completion says, for
`quality.evaluation` (an evaluation set). A set that has answers has one on every row.
Parsing is plain JSON with bounds on sizes; nothing in a row is executed or rendered here (chat templates render on
the follower, in a sandbox).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO

from common.formats.lines import bounded_lines

MAX_TOKENS = 131_072
MAX_TEXT_CHARS = 1_000_000  # one prompt or message
MAX_TURNS = 256
ROLES = ("system", "user", "assistant")
KINDS = ("prompt", "messages", "conversation", "prompt_tokens")
ANSWER = "answer"  # listed beside the row kinds of a set whose rows all carry one
MAX_ANSWER_CHARS = 10_000
# The row kinds an api can send: messages (and conversations) need chat; a prompt text or a length go to either.
KINDS_FOR_API = {"completions": ("prompt", "prompt_tokens")} | {
    api: ("prompt", "messages", "prompt_tokens") for api in ("chat", "messages", "responses")
}


SHAREGPT = "conversations"
SHAREGPT_ROLES = {"human": "user", "user": "user", "system": "system"} | {
    speaker: "assistant" for speaker in ("gpt", "chatgpt", "bard", "bing", "assistant", "model")
}
MAX_ARRAY_CHARS = 256 * 2**20  # a ShareGPT array is read whole: larger dumps are split into JSON lines first


class BadPrompts(ValueError):
    """A line that is not a prompt row (the message names the line and what is wrong)."""


@dataclass(frozen=True)
class PrefixBlocks:
    """The blocks a prompt of a given length starts with (a Mooncake trace's hash_ids): each id is `tokens` tokens,
    the same ones wherever it recurs, so two prompts whose ids agree up to block k share exactly k blocks."""

    ids: tuple[int, ...]
    tokens: int


@dataclass(frozen=True)
class PromptRow:
    """One request's prompt: text, chat messages or a length in tokens; and the output length it asks for (None: the
    job's distribution draws it)."""

    prompt: str | None = None
    messages: tuple[tuple[str, str], ...] | None = None  # (role, content)
    prompt_tokens: int | None = None
    output_tokens: int | None = None
    answer: str | None = None  # what a correct completion says (an evaluation set's row)
    blocks: PrefixBlocks | None = None  # a length's leading blocks (a replayed Mooncake trace)

    @property
    def kind(self) -> str:
        return "prompt" if self.prompt is not None else "messages" if self.messages is not None else "prompt_tokens"


def _tokens(value: object, what: str, number: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= MAX_TOKENS:
        raise BadPrompts(f"line {number}: {what} must be a whole number of tokens in 1..{MAX_TOKENS}")
    return value


def _text(value: object, what: str, number: int) -> str:
    if not isinstance(value, str) or not value or len(value) > MAX_TEXT_CHARS:
        raise BadPrompts(f"line {number}: {what} must be non-empty text of at most {MAX_TEXT_CHARS:,} characters")
    return value


def _messages(value: object, what: str, number: int) -> list[tuple[str, str]]:
    if not isinstance(value, list) or not value or len(value) > MAX_TURNS:
        raise BadPrompts(f"line {number}: {what} must be a list of 1..{MAX_TURNS} messages")
    out = []
    for k, message in enumerate(value):
        if not isinstance(message, dict) or set(message) != {"role", "content"} or message["role"] not in ROLES:
            raise BadPrompts(f"line {number}: {what}[{k}] must be {{role: {'|'.join(ROLES)}, content: text}}")
        out.append((message["role"], _text(message["content"], f"{what}[{k}].content", number)))
    return out


def _answer(value: object, kind: str, number: int) -> str:
    if kind not in ("prompt", "messages"):
        raise BadPrompts(f"line {number}: an answer goes with a prompt or messages row, not a {kind} row")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    if not isinstance(value, str) or not value.strip() or len(value) > MAX_ANSWER_CHARS:
        raise BadPrompts(f"line {number}: answer must be a number or non-empty text of at most {MAX_ANSWER_CHARS:,} characters")
    return value


def _sharegpt(doc: dict[str, object], number: int) -> dict[str, object]:
    """A ShareGPT conversation as this format's conversation row."""
    turns = doc[SHAREGPT]
    if not isinstance(turns, list) or not turns or len(turns) > MAX_TURNS:
        raise BadPrompts(f"line {number}: conversations must be a list of 1..{MAX_TURNS} turns")
    messages = []
    for k, turn in enumerate(turns):
        if not isinstance(turn, dict) or turn.get("from") not in SHAREGPT_ROLES or "value" not in turn:
            raise BadPrompts(f"line {number}: conversations[{k}] must be {{from: {'|'.join(SHAREGPT_ROLES)}, value: text}}")
        text = _text(turn["value"], f"conversations[{k}].value", number)
        messages.append({"role": SHAREGPT_ROLES[str(turn["from"])], "content": text})
    return {"conversation": messages}


def parse_row(doc: object, number: int) -> list[PromptRow]:
    """The requests one line makes (a conversation makes one per user turn)."""
    if not isinstance(doc, dict):
        raise BadPrompts(f"line {number}: must be a JSON object")
    if SHAREGPT in doc:
        doc = _sharegpt(doc, number)
    kinds = [k for k in KINDS if k in doc]
    unknown = set(doc) - set(KINDS) - {"output_tokens", ANSWER}
    if len(kinds) != 1 or unknown:
        raise BadPrompts(
            f"line {number}: must hold exactly one of {', '.join(KINDS)} (and optionally output_tokens, answer)"
            + (f"; unknown fields {sorted(unknown)}" if unknown else "")
        )
    output = _tokens(doc["output_tokens"], "output_tokens", number) if "output_tokens" in doc else None
    kind = kinds[0]
    answer = _answer(doc[ANSWER], kind, number) if ANSWER in doc else None
    if kind == "prompt":
        return [PromptRow(prompt=_text(doc["prompt"], "prompt", number), output_tokens=output, answer=answer)]
    if kind == "prompt_tokens":
        return [PromptRow(prompt_tokens=_tokens(doc["prompt_tokens"], "prompt_tokens", number), output_tokens=output)]
    messages = _messages(doc[kind], kind, number)
    if messages[-1][0] != "user" and kind == "messages":
        raise BadPrompts(f"line {number}: messages must end with a user message")
    if kind == "messages":
        return [PromptRow(messages=tuple(messages), output_tokens=output, answer=answer)]
    # A conversation: one request per user turn, with everything before it (the recorded replies included).
    rows = [
        PromptRow(messages=tuple(messages[: k + 1]), output_tokens=output)
        for k, (role, _) in enumerate(messages)
        if role == "user"
    ]
    if not rows:
        raise BadPrompts(f"line {number}: conversation has no user turn")
    return rows


def _documents(text: IO[str]) -> Iterator[tuple[int, object]]:
    """(line number, JSON value) of each JSON line, or of each element of a file that is one JSON array."""
    lines = bounded_lines(text, bad=BadPrompts)
    for number, line in lines:
        if not line.strip():
            continue
        if line.lstrip().startswith("["):
            try:
                rest = text.read(MAX_ARRAY_CHARS)
            except UnicodeDecodeError as exc:
                raise BadPrompts(f"not UTF-8 text: {exc}") from None
            yield from _array(number, line + rest)
            return
        yield number, _json(line, number)
        break
    for number, line in lines:
        if line.strip():
            yield number, _json(line, number)


def _json(line: str, number: int) -> object:
    try:
        return json.loads(line)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BadPrompts(f"line {number} is not JSON: {exc}") from None


def _array(first_line: int, whole: str) -> Iterator[tuple[int, object]]:
    """Each element of a JSON array (a ShareGPT dump), read one at a time, with the line it starts on."""
    if len(whole) > MAX_ARRAY_CHARS:
        raise BadPrompts(f"a JSON array of more than {MAX_ARRAY_CHARS:,} characters: split it into JSON lines")
    decoder = json.JSONDecoder()
    at, line = whole.index("[") + 1, first_line
    counted = 0

    def skip(at: int) -> int:
        while at < len(whole) and whole[at] in " \t\r\n":
            at += 1
        return at

    at = skip(at)
    while at < len(whole) and whole[at] != "]":
        line += whole.count("\n", counted, at)
        counted = at
        try:
            doc, at = decoder.raw_decode(whole, at)
        except json.JSONDecodeError as exc:
            raise BadPrompts(f"line {line + whole.count(chr(10), counted, exc.pos)} is not JSON: {exc.msg}") from None
        yield line, doc
        at = skip(at)
        if at < len(whole) and whole[at] == ",":
            at = skip(at + 1)
        elif at < len(whole) and whole[at] != "]":
            raise BadPrompts(f"line {line + whole.count(chr(10), counted, at)}: expected , or ] in the JSON array")
    if at >= len(whole) or whole[skip(at + 1) :].strip():
        raise BadPrompts("the JSON array is not closed by ] at the end of the file")


def parse_lines(text: IO[str]) -> tuple[list[PromptRow], list[str]]:
    """Every row of a prompts file, and the kinds it holds (sorted; with ANSWER last where every row has an answer);
    BadPrompts naming the first bad line (or the first longer than common.formats.lines.MAX_LINE_CHARS), or the first
    line without an answer in a set whose other rows have one."""
    rows: list[PromptRow] = []
    unanswered: int | None = None
    for number, doc in _documents(text):
        parsed = parse_row(doc, number)
        if unanswered is None and parsed[0].answer is None:
            unanswered = number
        rows.extend(parsed)
    if not rows:
        raise BadPrompts("no prompt rows")
    answered = [r.answer is not None for r in rows]
    if any(answered) and not all(answered):
        raise BadPrompts(f"line {unanswered}: has no answer, while other rows have one (an evaluation set answers every row)")
    kinds = sorted({r.kind for r in rows})  # a conversation's rows are messages
    return rows, [*kinds, ANSWER] if all(answered) else kinds
