"""OpenAI-compatible completions (vLLM, SGLang, TensorRT-LLM, llama.cpp) over the raw HTTP/1.1 client, streaming
or not: per request, when each token event arrived (every event with choices, its text empty or not; not a chat
role announcement or a closing event: `is_token_event`), the text, and the server's own token counts.

Each network read is stamped once, as it arrives, and every event it completes carries that stamp: a token's time
is when its bytes reached the generator, not when anything parsed them. Per event the parser scans for the event's
end and for its text field (byte searches, no JSON decode); only an event holding `usage` (the last, with
`stream_options.include_usage`) and a non-streamed answer are decoded. The text stays JSON-escaped until the run is
over (follower/loadgen/llmtruth.py counts its tokens then).
"""

from __future__ import annotations

import contextlib
import time
from typing import Any, cast

import orjson

from follower.protocols.transports.base import Answer, Stream
from follower.protocols.transports.http1 import Head, HttpError, parse_head
from follower.protocols.transports.rawhttp import ConnBase, RawHttpSession, RawHttpTransport
from follower.protocols.transports.sse import DONE, Dechunker, SseParser, StreamError

_monotonic_ns = time.monotonic_ns
TEXT_KEYS = (b'"text":', b'"content":')  # completions, chat completions (delta)


def text_field(data: bytes) -> bytes:
    """The JSON-escaped text of one event (b"" when it has none, or null), found without decoding the JSON."""
    for key in TEXT_KEYS:
        at = data.find(key)
        if at < 0:
            continue
        start = at + len(key)
        while start < len(data) and data[start] in b" \t":
            start += 1
        if start >= len(data) or data[start] != 0x22:  # null, or not a string
            return b""
        start += 1
        end = data.find(b'"', start)
        while end > 0 and data[end - 1] == 0x5C:  # a quote after a backslash: escaped unless that one is too
            run = 1
            while data[end - 1 - run] == 0x5C:
                run += 1
            if run % 2 == 0:
                break
            end = data.find(b'"', end + 1)
        return data[start:end] if end > 0 else b""
    return b""


def _after(data: bytes, key: bytes) -> int:
    """The first byte after `key` and any blanks (-1 when the key is absent)."""
    at = data.find(key)
    if at < 0:
        return -1
    at += len(key)
    while at < len(data) and data[at] in b" \t":
        at += 1
    return at


def is_token_event(data: bytes) -> bool:
    """Whether an event without text is a token's: it has choices, and it is neither a chat answer's role announcement
    (a delta with `role`) nor a closing event (a `finish_reason` set, nothing generated). A token whose bytes do not
    complete a character yet arrives as such an event, its text coming with the next one (vLLM, 3-8% of events)."""
    at = _after(data, b'"choices":')
    if at < 0 or at >= len(data) or data[at] != 0x5B:  # no choices, or not a list
        return False
    rest = at + 1
    while rest < len(data) and data[rest] in b" \t":
        rest += 1
    if rest >= len(data) or data[rest] == 0x5D:  # "choices": [] (the usage event)
        return False
    if data.find(b'"role":') >= 0:
        return False
    reason = _after(data, b'"finish_reason":')
    return not (0 <= reason < len(data) and data[reason] == 0x22)  # a finish reason, no text: the stream's close


def usage_of(doc: Any) -> tuple[int | None, int | None]:
    """(prompt_tokens, completion_tokens) of a decoded answer or event's `usage`."""
    usage = doc.get("usage") if isinstance(doc, dict) else None
    if not isinstance(usage, dict):
        return None, None
    prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
    return (prompt if isinstance(prompt, int) else None), (completion if isinstance(completion, int) else None)


class _StreamConn(ConnBase):
    """One keep-alive connection whose answers are read as they stream."""

    __slots__ = (
        "buf",
        "first_ns",
        "head",
        "dechunker",
        "parser",
        "events_ns",
        "texts",
        "events",
        "usage",
        "body",
        "done_seen",
        "sse",
        "received",
    )

    def __init__(self, pool: RawHttpSession) -> None:
        self.pool = pool
        self.waiter: Any = None
        self.closed = False
        self._reset()

    def _reset(self) -> None:
        self.buf = bytearray()
        self.first_ns = 0
        self.head: Head | None = None
        self.dechunker = Dechunker()
        self.parser = SseParser()
        self.events_ns: list[int] = []
        self.texts: list[bytes] = []
        self.events = 0
        self.usage: tuple[int | None, int | None] = (None, None)
        self.body = bytearray()  # a non-streamed (or error) answer's body
        self.done_seen = False
        self.sse: bool | None = None  # whether the answer is an event stream (decided by its first payload bytes)
        self.received = 0  # payload bytes so far (a Content-Length answer ends at its length)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.waiter is not None and not self.waiter.done():
            if self.head is not None and self.head[2] < 0 and not self.head[3]:  # an answer framed by the close
                self._complete()
            else:
                self._fail(self.mid_answer(exc))

    def data_received(self, data: bytes) -> None:
        ns = _monotonic_ns()
        if self.waiter is None:
            self.closed = True
            self.transport.close()
            return
        if self.first_ns == 0:
            self.first_ns = ns
        try:
            if self.head is None:
                self.buf += data
                self.head = parse_head(self.buf)
                if self.head is None:
                    return
                data = bytes(self.buf[self.head[1] :])
                self.buf = bytearray()
                self.pool.keep_alive(self, self.head[5])
            status, _, length, chunked, _, _ = self.head
            payload = self.dechunker.feed(data) if chunked else data
            self.received += len(payload)
            if self.sse is None and payload:
                self.sse = status == 200 and payload.lstrip().startswith((b"data:", b":", b"event:"))
            if self.sse:
                for event_ns, event in self.parser.feed(payload, ns):
                    self._event(event_ns, event)
            else:
                self.body += payload
            if (chunked and self.dechunker.finished) or (not chunked and 0 <= length <= self.received):
                self._complete()
        except (HttpError, StreamError) as exc:
            self._fail(str(exc))

    def _event(self, ns: int, data: bytes) -> None:
        if data == DONE:
            self.done_seen = True
            return
        self.events += 1
        text = text_field(data)
        if text or is_token_event(data):
            self.events_ns.append(ns)
            self.texts.append(text)
        at = data.find(b'"usage":')
        if at >= 0 and data[at + 8 : at + 16].lstrip().startswith(b"{"):  # not "usage": null
            with contextlib.suppress(orjson.JSONDecodeError):
                self.usage = usage_of(orjson.loads(data))

    def _complete(self) -> None:
        waiter, self.waiter = self.waiter, None
        status, close = (self.head[0], self.head[4]) if self.head is not None else (0, True)
        answer = self._answer(status)
        self._reset()
        if close:
            self.closed = True
            self.transport.close()
        else:
            self.pool.release(self)
        if waiter is not None and not waiter.done():
            waiter.set_result(answer)

    def _answer(self, status: int) -> Answer:
        done_ns = _monotonic_ns()
        if status != 200:
            error = f"HTTP {status}: {bytes(self.body[:300]).decode('utf-8', 'replace')}"
            return Answer(status, self.first_ns, done_ns, None, error)
        if self.sse:
            stream = Stream(self.events_ns, b"".join(self.texts), *self.usage, events=self.events)
            return Answer(200, self.first_ns, done_ns, stream=stream)
        # Not streamed: one JSON answer; its text arrived with its last byte.
        try:
            doc = orjson.loads(self.body)
        except orjson.JSONDecodeError:
            return Answer(0, self.first_ns, done_ns, None, "a 200 answer that is neither a stream nor JSON")
        text = text_field(bytes(self.body))
        stream = Stream([done_ns] if text else [], text, *usage_of(doc), events=1)
        return Answer(200, self.first_ns, done_ns, stream=stream)


class OpenAiStreamTransport(RawHttpTransport):
    """Completions (or chat completions) to an OpenAI-compatible server; bodies are the requests' JSON."""

    conn_factory = _StreamConn

    def answer_of(self, result: Any) -> Answer:
        return cast(Answer, result)
