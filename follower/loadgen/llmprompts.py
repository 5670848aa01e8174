"""A language-model point's request bodies: prompts of exact token lengths, by the model's own tokenizer, and the
OpenAI-compatible JSON that asks for exact output lengths.

A prompt is built of whole words the tokenizer holds as single tokens after a space (its pre-tokenizer splits on
spaces, so the words cannot merge): n of them, plus what the tokenizer adds (a beginning-of-sequence token), is
n + that many tokens, which the tokenizer confirms for every prompt before it is used. The server's own count comes
back in each answer's usage and is checked against this one after the run.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import orjson

from common.llmspec import LlmWorkload

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

    def prompt(self, tokens: int, rng: np.random.Generator) -> str:
        """A prompt of exactly `tokens` tokens (at least what the tokenizer adds, plus one word)."""
        words = max(tokens - self.added, 1)
        text = "".join(rng.choice(self.pool, size=words))
        got = self.count(text)
        if got != self.least(tokens):
            raise ValueError(f"a prompt of {words} words came to {got} tokens, not {tokens}: this tokenizer merges words")
        return text

    def least(self, tokens: int, chat: bool = False) -> int:
        """The length a prompt asked to be `tokens` long gets: that, or the shortest one (what the tokenizer or the
        chat template adds, plus one word)."""
        return max(tokens, (self.chat_overhead() if chat else self.added) + 1)

    def render_chat(self, content: str) -> str:
        """The text the server tokenizes for one user message: the model's chat template, rendered in a sandbox."""
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        template = self.config.get("chat_template")
        if not isinstance(template, str):
            raise ValueError("the model has no chat template (tokenizer_config.json chat_template): use api: completions")

        def token(key: str) -> str:
            value = self.config.get(key)
            return str(value.get("content", "")) if isinstance(value, dict) else str(value or "")

        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        return env.from_string(template).render(messages=[{"role": "user", "content": content}],
                                                add_generation_prompt=True, bos_token=token("bos_token"),
                                                eos_token=token("eos_token"))  # fmt: skip

    def count_chat(self, content: str) -> int:
        """Tokens of a chat request with one user message, as the server counts them (the template adds its own)."""
        return len(self.tokenizer.encode(self.render_chat(content), add_special_tokens=False).ids)

    def chat_overhead(self) -> int:
        """What the chat template adds around one message, in tokens."""
        if self._chat_overhead is None:
            self._chat_overhead = self.count_chat(str(self.pool[0]).lstrip()) - 1
        return self._chat_overhead

    def chat_prompt(self, tokens: int, rng: np.random.Generator) -> str:
        """A user message whose chat request is exactly `tokens` tokens long (template included)."""
        words = max(tokens - self.chat_overhead(), 1)
        content = "".join(rng.choice(self.pool, size=words)).lstrip()
        got = self.count_chat(content)
        if got != self.least(tokens, chat=True):
            raise ValueError(f"a chat message of {words} words came to {got} tokens, not {tokens}: the template merges them")
        return content


def llm_bodies(workload: LlmWorkload, model_name: str, maker: PromptMaker, n: int,
               seed: int) -> tuple[list[bytes], np.ndarray, np.ndarray, np.ndarray]:  # fmt: skip
    """One request body per scheduled request (prompt and output lengths drawn per request), the body index, and the
    prompt and output tokens each request holds and asks for."""
    rng = np.random.default_rng(seed)
    prompts = workload.prompt_tokens.draw(n, rng)
    outputs = workload.output_tokens.draw(n, rng)
    chat = workload.api == "chat"
    make = maker.chat_prompt if chat else maker.prompt
    bodies = [request_body(workload, model_name, make(int(p), rng), int(o)) for p, o in zip(prompts, outputs, strict=True)]
    held = np.array([maker.least(int(p), chat=chat) for p in prompts], dtype=np.int64)
    return bodies, np.arange(n, dtype=np.int64), held, outputs


def request_body(workload: LlmWorkload, model_name: str, prompt: str, output_tokens: int) -> bytes:
    """The JSON of one completions (or chat completions) request asking for exactly `output_tokens` tokens."""
    body: dict[str, Any] = {"model": model_name, "max_tokens": output_tokens, "stream": workload.stream}
    if workload.api == "chat":
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    if workload.ignore_eos:
        body |= {"ignore_eos": True, "min_tokens": output_tokens}
    if workload.stream:
        body["stream_options"] = {"include_usage": True}
    return orjson.dumps(body)


def request_url(url: str, workload: LlmWorkload | None) -> str:
    """The URL a point's requests go to: the server's completions URL, or its chat sibling for `api: chat`."""
    if workload is not None and workload.api == "chat":
        return url.replace("/v1/completions", "/v1/chat/completions")
    return url
