"""The streamed events of Anthropic's Messages API and OpenAI's Responses API, read by the same streaming client as
OpenAI's completions (openai_stream.py: each network read stamped once, every event it completes carrying that
stamp, no JSON decoded per token); only what an event is differs.

Messages (https://docs.anthropic.com/en/api/messages-streaming): `message_start` (the message, its usage's
`input_tokens`, and `cache_read_input_tokens` and `cache_creation_input_tokens`: the prompt's tokens are the three
together), `content_block_start`, `content_block_delta` (a `text_delta` with `text`: one token event; a
thinking or tool input delta is not text), `content_block_stop`, `message_delta` (its usage's `output_tokens`, the
count so far), `message_stop`, and `ping`. Responses (https://platform.openai.com/docs/api-reference/responses-streaming):
`response.created`, `response.output_text.delta` (its `delta`: one token event), `response.output_text.done` (the whole
text again: not a token), `response.completed` (the response, its usage's `input_tokens` and `output_tokens`), and
others that carry no text. Both answers, unstreamed, are one JSON object with the same `usage` keys.
"""

from __future__ import annotations

import contextlib
from typing import Any

import orjson

from follower.protocols.transports.openai_stream import DONE, OpenAiStreamTransport, _StreamConn, string_at

ANTHROPIC_CACHE_USAGE = ("cache_read_input_tokens", "cache_creation_input_tokens")


def input_output_usage(doc: Any) -> tuple[int | None, int | None]:
    """(input_tokens, output_tokens) of a `usage` in `doc`, or in its `message` or `response` (where the events put it)."""
    if not isinstance(doc, dict):
        return None, None
    usage = doc.get("usage")
    for holder in ("message", "response"):
        inner = doc.get(holder)
        if not isinstance(usage, dict) and isinstance(inner, dict):
            usage = inner.get("usage")
    if not isinstance(usage, dict):
        return None, None
    prompt, output = usage.get("input_tokens"), usage.get("output_tokens")
    if isinstance(prompt, int):
        # Anthropic's input_tokens leaves out what the prompt cache read or was written from (its total input is the
        # three together); OpenAI's Responses counts its cached tokens inside input_tokens (input_tokens_details).
        prompt += sum(v for k in ANTHROPIC_CACHE_USAGE if isinstance(v := usage.get(k), int))
    return (prompt if isinstance(prompt, int) else None), (output if isinstance(output, int) else None)


class _EventsConn(_StreamConn):
    """A streaming connection whose token events are the API's text deltas (TOKEN_EVENT holding DELTA_KEY) and
    whose counts come with its usage events (USAGE_EVENTS)."""

    TOKEN_EVENT = b""
    DELTA_KEY = b""
    USAGE_EVENTS: tuple[bytes, ...] = ()

    def _event(self, ns: int, data: bytes) -> None:
        if data == DONE:
            self.done_seen = True
            return
        self.events += 1
        if data.find(self.TOKEN_EVENT) >= 0:
            at = data.find(self.DELTA_KEY)
            if at >= 0:
                self.counted += 1
                self.events_ns.append(ns)
                self.texts.append(string_at(data, at + len(self.DELTA_KEY)))
            return
        if any(data.find(kind) >= 0 for kind in self.USAGE_EVENTS):
            with contextlib.suppress(orjson.JSONDecodeError):
                prompt, output = self.usage_of(orjson.loads(data))
                self.usage = (prompt if prompt is not None else self.usage[0], output if output is not None else self.usage[1])

    @staticmethod
    def usage_of(doc: Any) -> tuple[int | None, int | None]:
        return input_output_usage(doc)


class _MessagesConn(_EventsConn):
    TOKEN_EVENT = b'"text_delta"'
    DELTA_KEY = b'"text":'
    USAGE_EVENTS = (b'"message_start"', b'"message_delta"')


class _ResponsesConn(_EventsConn):
    TOKEN_EVENT = b'"response.output_text.delta"'
    DELTA_KEY = b'"delta":'
    USAGE_EVENTS = (b'"response.completed"',)


class MessagesStreamTransport(OpenAiStreamTransport):
    """Anthropic Messages requests; bodies are the requests' JSON."""

    conn_factory = _MessagesConn


class ResponsesStreamTransport(OpenAiStreamTransport):
    """OpenAI Responses requests; bodies are the requests' JSON."""

    conn_factory = _ResponsesConn
