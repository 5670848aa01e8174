"""A language-model point's request bodies: prompts of exact token lengths, by the model's own tokenizer, and the
OpenAI-compatible JSON that asks for exact output lengths.

A prompt is built of whole words the tokenizer holds as single tokens after a space (its pre-tokenizer splits on
spaces, so the words cannot merge): n of them, plus what the tokenizer adds (a beginning-of-sequence token), is
n + that many tokens, which the tokenizer confirms for every prompt before it is used. The server's own count comes
back in each answer's usage and is checked against this one after the run.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import orjson

from common.formats.llmdata import PrefixBlocks, PromptRow
from common.formats.traces import Trace
from common.spec.llm import LlmWorkload
from follower.loadgen.llmimages import images_of, with_images

MIN_POOL = 256  # words needed for prompts that do not repeat themselves


class PromptMaker:
    """Prompts of exact token counts for one tokenizer (tokenizer.json text; tokenizer_config.json for chat)."""

    def __init__(self, tokenizer_json: str, config: dict[str, Any] | None = None) -> None:
        from tokenizers import Tokenizer

        self.tokenizer = Tokenizer.from_str(tokenizer_json)
        self.config = config or {}
        self._chat_overhead: int | None = None
        self.added = len(self.tokenizer.encode("", add_special_tokens=True).ids)  # what the tokenizer adds (BOS)
        pool: list[str] = []
        for token_id in range(self.tokenizer.get_vocab_size()):
            text = self.tokenizer.decode([token_id], skip_special_tokens=True)
            word = len(text) > 2 and text[0] == " " and text[1:].isascii() and text[1:].isalpha()
            if word and self.tokenizer.encode(text, add_special_tokens=False).ids == [token_id]:
                pool.append(text)
        if len(pool) < MIN_POOL:
            raise ValueError(f"the tokenizer holds only {len(pool)} words as single tokens; prompts need {MIN_POOL}")
        self.pool = np.array(pool, dtype=object)

    def count(self, text: str) -> int:
        """Tokens of a prompt as the server counts them (with what the tokenizer adds)."""
        return len(self.tokenizer.encode(text, add_special_tokens=True).ids)

    def count_output(self, text: str) -> int:
        """Tokens of generated text (nothing added)."""
        return len(self.tokenizer.encode(text, add_special_tokens=False).ids)

    def prompt(self, tokens: int, rng: np.random.Generator, prefix: str = "") -> str:
        """A prompt of exactly `tokens` tokens (at least what the tokenizer adds, plus one word) after `prefix` (whole
        words from `words`, each one token more)."""
        words = max(tokens - self.added, 1)
        text = prefix + "".join(rng.choice(self.pool, size=words))
        got = self.count(text)
        if got != self.least(tokens) + self.words_in(prefix):
            raise ValueError(f"a prompt of {words} words came to {got} tokens, not {tokens}: this tokenizer merges words")
        return text

    def block_prompt(self, tokens: int, blocks: Sequence[np.ndarray], rng: np.random.Generator, chat: bool) -> str:
        """A prompt (a chat message's content under `chat`) of exactly `tokens` tokens whose words start with the
        `blocks` (arrays of pool words, one token each) in order, the last one cut where the prompt ends, then fresh
        words where the blocks run out: two prompts starting with the same blocks share exactly those tokens."""
        room = max(tokens - (self.chat_overhead() if chat else self.added), 1)
        taken: list[np.ndarray] = []
        held = 0
        for block in blocks:
            if held >= room:
                break
            taken.append(block[: room - held])
            held += len(taken[-1])
        if held < room:
            taken.append(rng.choice(self.pool, size=room - held))
        text = "".join(np.concatenate(taken))
        got = self.count_chat(text.lstrip()) if chat else self.count(text)
        if got != self.least(tokens, chat=chat):
            raise ValueError(f"a prompt of {room} block words came to {got} tokens, not {tokens}: this tokenizer merges words")
        return text.lstrip() if chat else text

    def block(self, block_id: int, tokens: int, seed: int) -> np.ndarray:
        """Prefix block `block_id`: `tokens` pool words drawn from (seed, id) alone, the same wherever the id recurs."""
        return np.random.default_rng([seed, block_id]).choice(self.pool, size=tokens)

    def words(self, tokens: int, rng: np.random.Generator) -> str:
        """`tokens` pool words: a shared prefix of exactly that many tokens wherever it starts a built prompt."""
        return "".join(rng.choice(self.pool, size=tokens))

    @staticmethod
    def words_in(prefix: str) -> int:
        """Tokens of a prefix made by `words` (one per word)."""
        return prefix.count(" ")

    def least(self, tokens: int, chat: bool = False) -> int:
        """The length a prompt asked to be `tokens` long gets: that, or the shortest one (what the tokenizer or the
        chat template adds, plus one word)."""
        return max(tokens, (self.chat_overhead() if chat else self.added) + 1)

    def render_chat(self, messages: str | Sequence[tuple[str, str]]) -> str:
        """The text the server tokenizes for a chat request (one user message, or (role, content) messages): the
        model's chat template, rendered in a sandbox."""
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        template = self.config.get("chat_template")
        if not isinstance(template, str):
            raise ValueError("the model has no chat template (tokenizer_config.json chat_template): use api: completions")

        def token(key: str) -> str:
            value = self.config.get(key)
            return str(value.get("content", "")) if isinstance(value, dict) else str(value or "")

        listed = [("user", messages)] if isinstance(messages, str) else messages
        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        return env.from_string(template).render(
            messages=[{"role": r, "content": c} for r, c in listed],
            add_generation_prompt=True,
            bos_token=token("bos_token"),
            eos_token=token("eos_token"),
        )

    def count_chat(self, messages: str | Sequence[tuple[str, str]]) -> int:
        """Tokens of a chat request, as the server counts them (the template adds its own)."""
        return len(self.tokenizer.encode(self.render_chat(messages), add_special_tokens=False).ids)

    def chat_overhead(self) -> int:
        """What the chat template adds around one message, in tokens."""
        if self._chat_overhead is None:
            self._chat_overhead = self.count_chat(str(self.pool[0]).lstrip()) - 1
        return self._chat_overhead

    def chat_prompt(self, tokens: int, rng: np.random.Generator, prefix: str = "") -> str:
        """A user message whose chat request is exactly `tokens` tokens long (template included) after `prefix`."""
        words = max(tokens - self.chat_overhead(), 1)
        content = (prefix + "".join(rng.choice(self.pool, size=words))).lstrip()
        got = self.count_chat(content)
        if got != self.least(tokens, chat=True) + self.words_in(prefix):
            raise ValueError(f"a chat message of {words} words came to {got} tokens, not {tokens}: the template merges them")
        return content


Prompt = str | list[tuple[str, str]]  # a completion's text, or a chat request's (role, content) messages


def llm_bodies(
    workload: LlmWorkload, model_name: str, maker: PromptMaker, n: int, seed: int, rows: Sequence[PromptRow] | None = None
) -> tuple[list[bytes], np.ndarray, np.ndarray, np.ndarray]:
    """One request body per scheduled request, the body index, and the prompt and output tokens each request holds
    and asks for. Prompts are drawn lengths made exact, or rows of an uploaded prompt set (`rows`, at random or in
    order); a shared prefix starts the share of requests the workload says."""
    rng = np.random.default_rng(seed)
    if workload.pooled:
        return _pooled_bodies(workload, model_name, maker, n, rng)
    drawn = workload.prompt_tokens.draw(n, rng) if not rows else np.zeros(n, dtype=np.int64)
    outputs = workload.output_tokens.draw(n, rng)
    picks = np.zeros(n, dtype=np.int64)
    if rows:
        picks = np.arange(n) % len(rows) if workload.order == "sequential" else rng.integers(0, len(rows), size=n)
    shared = workload.shared_prefix
    prefixes = [maker.words(shared.tokens, rng) for _ in range(shared.count)] if shared else [""]
    prefixed = rng.random(n) < shared.share if shared else np.zeros(n, dtype=bool)
    which = rng.integers(0, len(prefixes), size=n)
    bodies: list[bytes] = []
    held = np.zeros(n, dtype=np.int64)
    blocks: dict[tuple[int, int], np.ndarray] = {}  # (id, tokens): a prefix block's words, made once
    for i in range(n):
        prefix = prefixes[which[i]] if prefixed[i] else ""
        row = rows[picks[i]] if rows else None
        if row is not None and row.output_tokens is not None:
            outputs[i] = row.output_tokens
        if row is not None and row.blocks is not None and row.prompt_tokens is not None:
            size = row.blocks.tokens
            for b in row.blocks.ids:
                if (b, size) not in blocks:
                    blocks[(b, size)] = maker.block(b, size, seed)
            words = [blocks[(b, size)] for b in row.blocks.ids]
            chat = workload.templated
            prompt: Prompt = maker.block_prompt(row.prompt_tokens, words, rng, chat)
            held[i] = maker.least(row.prompt_tokens, chat=chat)
        else:
            prompt, held[i] = _prompt(workload, maker, rng, row, int(drawn[i]), prefix)
        images = images_of(workload.images, rng) if workload.images is not None else None
        bodies.append(request_body(workload, model_name, prompt, int(outputs[i]), images))
    return bodies, np.arange(n, dtype=np.int64), held, outputs


def _prompt(
    workload: LlmWorkload, maker: PromptMaker, rng: np.random.Generator, row: PromptRow | None, drawn: int, prefix: str
) -> tuple[Prompt, int]:
    """One request's prompt and its length in tokens as the server counts it."""
    chat = workload.templated
    if row is None or row.prompt_tokens is not None:
        length = row.prompt_tokens if row is not None and row.prompt_tokens is not None else drawn
        text = maker.chat_prompt(length, rng, prefix) if chat else maker.prompt(length, rng, prefix)
        return text, maker.least(length, chat=chat) + maker.words_in(prefix)
    if row.prompt is not None:
        text = prefix.lstrip() + "\n" + row.prompt if prefix else row.prompt
        return text, maker.count_chat(text) if chat else maker.count(text)
    messages = list(row.messages or ())
    if prefix:
        messages.insert(0, ("system", prefix.lstrip()))
    return messages, maker.count_chat(messages)


def _pooled_bodies(
    workload: LlmWorkload, model_name: str, maker: PromptMaker, n: int, rng: np.random.Generator
) -> tuple[list[bytes], np.ndarray, np.ndarray, np.ndarray]:
    """Embeddings or rerank requests: each `inputs_per_request` texts of drawn exact lengths (rerank: documents, after
    a query of a drawn length); held is their tokens together (an embeddings server's usage counts them so), and no
    output is asked."""
    per = workload.inputs_per_request + (workload.api == "rerank")
    lengths = workload.prompt_tokens.draw(n * per, rng).reshape(n, per)
    bodies, held = [], np.zeros(n, dtype=np.int64)
    for i in range(n):
        texts = [maker.prompt(int(t), rng) for t in lengths[i]]
        held[i] = sum(maker.least(int(t)) for t in lengths[i])
        if workload.api == "rerank":
            bodies.append(rerank_body(model_name, texts[0], texts[1:]))
        else:
            bodies.append(embeddings_body(model_name, texts))
    return bodies, np.arange(n, dtype=np.int64), held, np.zeros(n, dtype=np.int64)


def embeddings_body(model_name: str, texts: Sequence[str]) -> bytes:
    """An embeddings request of `texts`."""
    return orjson.dumps({"model": model_name, "input": list(texts), "encoding_format": "float"})


def rerank_body(model_name: str, query: str, documents: Sequence[str]) -> bytes:
    """A rerank request scoring `documents` against `query` (every one ranked)."""
    return orjson.dumps({"model": model_name, "query": query, "documents": list(documents), "top_n": len(documents)})


def trace_rows(trace: Trace, block_tokens: int) -> list[PromptRow]:
    """The rows of a trace that gives each request's lengths: request i takes entry i's, and where the trace gives
    prefix blocks (a Mooncake trace's hash_ids, `block_tokens` each) its prompt starts with them."""
    if trace.prompt_tokens is None or trace.output_tokens is None:
        raise ValueError("the trace gives no prompt and output lengths")
    blocks = trace.blocks or (None,) * len(trace)
    return [
        PromptRow(prompt_tokens=int(p), output_tokens=int(o), blocks=PrefixBlocks(b, block_tokens) if b is not None else None)
        for p, o, b in zip(trace.prompt_tokens, trace.output_tokens, blocks, strict=True)
    ]


def request_body(
    workload: LlmWorkload, model_name: str, prompt: Prompt, output_tokens: int, images: list[bytes] | None = None
) -> bytes:
    """The JSON of one request of the workload's API asking for `output_tokens` tokens (exactly, where the API can be
    asked to: ignore_eos), `images` in its last user message."""
    listed = [("user", prompt)] if isinstance(prompt, str) else prompt
    messages: list[dict[str, Any]] = [{"role": role, "content": content} for role, content in listed]
    if images:
        last = max(k for k, m in enumerate(messages) if m["role"] == "user")
        messages[last]["content"] = with_images(workload.api, messages[last]["content"], images)
    if workload.api == "embeddings":  # the texts to embed, nothing generated
        return embeddings_body(model_name, [content for _, content in listed])
    if workload.api == "rerank":  # one document scored against the text as the query
        return rerank_body(model_name, listed[-1][1], [listed[-1][1]])
    if workload.api == "messages":  # Anthropic's: a system prompt goes beside the messages, never among them
        system = "\n".join(m["content"] for m in messages if m["role"] == "system")
        body: dict[str, Any] = {"model": model_name, "max_tokens": output_tokens, "stream": workload.stream}
        body["messages"] = [m for m in messages if m["role"] != "system"]
        return orjson.dumps(body | ({"system": system} if system else {}))
    if workload.api == "responses":  # OpenAI's: the conversation as input items; nothing kept on the server
        body = {"model": model_name, "max_output_tokens": output_tokens, "stream": workload.stream, "store": False}
        body["input"] = messages
        return orjson.dumps(body | ({"ignore_eos": True} if workload.ignore_eos else {}))
    body = {"model": model_name, "max_tokens": output_tokens, "stream": workload.stream}
    if workload.templated:
        body["messages"] = messages
    else:
        body["prompt"] = prompt
    if workload.ignore_eos:
        body |= {"ignore_eos": True, "min_tokens": output_tokens}
    if workload.stream:
        body["stream_options"] = {"include_usage": True}
        if workload.usage_per_event:  # the server's count in every event: the client splits multi-token events
            body["stream_options"]["continuous_usage_stats"] = True
    return orjson.dumps(body)
