"""OpenAI-compatible completions (vLLM, SGLang, TensorRT-LLM, llama.cpp) over the raw HTTP/1.1 client, streaming
or not: per request, when each token event arrived (every event with choices, its text empty or not; not a chat
role announcement or a closing event: `is_token_event`), the text, and the server's own token counts.

Each network read is stamped once, as it arrives, and every event it completes carries that stamp: a token's time
is when its bytes reached the generator, not when anything parsed them. Where the server puts its count in every event
(`stream_options.continuous_usage_stats`, asked of vLLM and SGLang), an event carrying k tokens is k token arrivals
at its time: the first token's gap is the time since the previous event, the others' 0. Per event the parser scans for the event's
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


EVENT_STREAM_STARTS = (b"data:", b":", b"event:")


def is_event_stream(start: bytes | bytearray) -> bool | None:
    """Whether a 200 answer whose payload begins with `start` is a stream of server-sent events (None: too few bytes
    to tell yet, as when a network read ends inside `data:`)."""
    begun = bytes(start).lstrip()
    if begun.startswith(EVENT_STREAM_STARTS):
        return True
    return None if any(s.startswith(begun) for s in EVENT_STREAM_STARTS) else False


def text_field(data: bytes) -> bytes:
    """The JSON-escaped text of one event (b"" when it has none, or null), found without decoding the JSON."""
    at = data.find(b'"text":')
    if at >= 0:
        return string_at(data, at + 7)
    at = data.find(b'"content":')
    return string_at(data, at + 10) if at >= 0 else b""


def string_at(data: bytes, start: int) -> bytes:
    """The JSON-escaped string value starting at `start` (after its key and colon), or b"" when it is not a string."""
    n = len(data)
    while start < n and data[start] in b" \t":
        start += 1
    if start >= n or data[start] != 0x22:  # null, or not a string
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


def count_field(data: bytes, key: bytes) -> int | None:
    """The whole number after `key` in an event (b'"completion_tokens":'), found without decoding the JSON; None when
    absent."""
    at = _after(data, key)
    if at < 0:
        return None
    end = at
    while end < len(data) and 0x30 <= data[end] <= 0x39:
        end += 1
    return int(data[at:end]) if end > at else None


def event_tokens(data: bytes, text: bytes, counted: int) -> tuple[int, int, int | None] | None:
    """The tokens one data event brings (its `text` already found), given the `counted` so far: None when it is not a
    token event; else (token arrivals at its time, the running count after it, the server's count where the event
    carries one). With the server's count in every event (continuous usage), an event carrying k tokens is k arrivals
    (none when it says no token came with it); without one, each token event is one token."""
    if not (text or is_token_event(data)):
        return None
    count = count_field(data, b'"completion_tokens":')
    if count is None:
        return 1, counted + 1, None
    return max(0, count - counted), max(counted, count), count


def usage_of(doc: Any) -> tuple[int | None, int | None]:
    """(prompt_tokens, completion_tokens) of a decoded answer or event's `usage`."""
    usage = doc.get("usage") if isinstance(doc, dict) else None
    if not isinstance(usage, dict):
        return None, None
    prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
    return (prompt if isinstance(prompt, int) else None), (completion if isinstance(completion, int) else None)


class AnswerReader:
    """One HTTP/1.1 answer read as its bytes arrive: the head, the body undone from chunked encoding, and (a 200 whose
    first payload bytes say so: `is_event_stream`) its server-sent events, each with the time of the read that completed
    it. The generator's streaming client reads every answer so, and the wire audit reads the captured packets with it
    (follower/loadgen/wireaudit.py): one reading of an answer, on both clocks."""

    __slots__ = ("buf", "head", "dechunker", "parser", "body", "sse", "received")

    def __init__(self) -> None:
        self.buf = bytearray()  # the head's bytes until it is whole
        self.head: Head | None = None
        self.dechunker = Dechunker()
        self.parser = SseParser()
        self.body = bytearray()  # a non-streamed (or error) answer's body
        self.sse: bool | None = None  # whether the answer is an event stream (decided by its first payload bytes)
        self.received = 0  # payload bytes so far (a Content-Length answer ends at its length)

    def feed(self, data: bytes, ns: int) -> list[tuple[int, bytes]]:
        """The events `data` (read at `ns`) completes; HttpError or StreamError when the answer cannot be framed."""
        if self.head is None:
            self.buf += data
            self.head = parse_head(self.buf)
            if self.head is None:
                return []
            data = bytes(self.buf[self.head[1] :])
            self.buf = bytearray()
        status, _, _, chunked, _, _ = self.head
        payload = self.dechunker.feed(data) if chunked else data
        self.received += len(payload)
        if self.sse is None and payload:  # held in body until its first bytes tell what the answer is
            self.body += payload
            self.sse = is_event_stream(self.body) if status == 200 else False
            payload = b""
            if self.sse:
                payload, self.body = bytes(self.body), bytearray()
        if self.sse:
            return self.parser.feed(payload, ns)
        self.body += payload
        return []

    @property
    def at_event_boundary(self) -> bool:
        """Whether this answer is a chunked event stream under way and nothing is held back (the last read ended at a
        chunk's end and at an event's end): the next read then starts a chunk and an event."""
        return bool(self.sse and self.head is not None and self.head[3] and self.dechunker.idle and self.parser.idle)

    @property
    def whole(self) -> bool:
        """Whether the answer's framing says it is complete."""
        if self.head is None:
            return False
        length, chunked = self.head[2], self.head[3]
        return self.dechunker.finished if chunked else 0 <= length <= self.received

    @property
    def framed_by_close(self) -> bool:
        """Whether the answer ends when the connection closes (neither a length nor chunks)."""
        return self.head is not None and self.head[2] < 0 and not self.head[3]


class _StreamConn(ConnBase):
    """One keep-alive connection whose answers are read as they stream."""

    GENERATES = True  # an answer's text is generated output (not so for embeddings and rerank: a whole answer, no token)

    __slots__ = (
        "buf",
        "first_ns",
        "reader",
        "events_ns",
        "texts",
        "events",
        "usage",
        "done_seen",
        "counted",
        "steady",
    )

    def __init__(self, pool: RawHttpSession) -> None:
        self.pool = pool
        self.waiter: Any = None
        self.closed = False
        self._reset()

    def _reset(self) -> None:
        self.first_ns = 0
        self.reader = AnswerReader()
        self.events_ns: list[int] = []
        self.texts: list[bytes] = []
        self.events = 0
        self.usage: tuple[int | None, int | None] = (None, None)
        self.done_seen = False
        self.counted = 0  # tokens timed so far (a multi-token event adds its count)
        # The stream is under way and its last read ended at an event's end (nothing held back): the next read may take
        # the fast path (one chunk holding one one-line event, the usual read of a streamed token).
        self.steady = False

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closed and self.waiter is None:  # the server closed it while it was idle
            self.learn_stream_end()
        self.closed = True
        if self.waiter is not None and not self.waiter.done():
            if self.reader.framed_by_close:
                self._complete()
            else:
                self._fail(self.mid_answer(exc))

    def data_received(self, data: bytes) -> None:
        ns = _monotonic_ns()
        if self.steady:
            # The usual read of a stream under way: one chunk (`size CRLF data: {json} LF LF CRLF`) holding one event.
            # Its framing is checked here in a few byte operations; any other read takes the general path below.
            crlf = data.find(b"\r\n", 0, 10)
            if crlf > 0 and data.endswith(b"\n\n\r\n") and data.startswith(b"data: ", crlf + 2):
                event = data[crlf + 8 : -4]
                try:
                    size = int(data[:crlf], 16)
                except ValueError:
                    size = -1
                if size == len(event) + 8 and event.find(b"\n") < 0 and event.find(b"\r") < 0:
                    self._event(ns, event)
                    return
        if self.waiter is None:
            self.closed = True
            self.transport.close()
            return
        if self.first_ns == 0:
            self.first_ns = ns
        reader = self.reader
        try:
            headless = reader.head is None
            for event_ns, event in reader.feed(data, ns):
                self._event(event_ns, event)
            if headless and reader.head is not None:
                self.pool.keep_alive(self, reader.head[5])
            if reader.whole:
                self._complete()
            else:
                self.steady = reader.at_event_boundary
        except (HttpError, StreamError) as exc:
            self._fail(str(exc))

    def _event(self, ns: int, data: bytes) -> None:
        if data == DONE:
            self.done_seen = True
            return
        self.events += 1
        text = text_field(data)
        if text and data.find(b'"completion_tokens":') < 0:  # the usual token event: one token, its text
            self.counted += 1
            self.events_ns.append(ns)
            self.texts.append(text)
            return
        tokens = event_tokens(data, text, self.counted)
        if tokens is not None:
            arrived, self.counted, count = tokens
            self.events_ns.extend([ns] * arrived)
            if count is not None:
                self.usage = (count_field(data, b'"prompt_tokens":'), count)
            self.texts.append(text)
            return
        at = data.find(b'"usage":')
        if at >= 0 and data[at + 8 : at + 16].lstrip().startswith(b"{"):  # not "usage": null
            with contextlib.suppress(orjson.JSONDecodeError):
                self.usage = self.usage_of(orjson.loads(data))

    @staticmethod
    def usage_of(doc: Any) -> tuple[int | None, int | None]:
        """(prompt tokens, output tokens) of a decoded answer's or event's usage, as this API names them."""
        return usage_of(doc)

    def _complete(self) -> None:
        waiter, self.waiter = self.waiter, None
        head = self.reader.head
        status, close = (head[0], head[4]) if head is not None else (0, True)
        answer = self._answer(status)
        self.streamed = bool(self.reader.sse)
        self._reset()
        if close or (self.streamed and self.pool.streams_end_connections):
            self.closed = True
            self.transport.close()
        else:
            self.pool.release(self)
        if waiter is not None and not waiter.done():
            waiter.set_result(answer)

    def _answer(self, status: int) -> Answer:
        done_ns = _monotonic_ns()
        body, sse = self.reader.body, self.reader.sse
        if status != 200:
            error = f"HTTP {status}: {bytes(body[:300]).decode('utf-8', 'replace')}"
            return Answer(status, self.first_ns, done_ns, None, error)
        if sse:
            stream = Stream(self.events_ns, b"".join(self.texts), *self.usage, events=self.events)
            return Answer(200, self.first_ns, done_ns, stream=stream)
        # Not streamed: one JSON answer; its text arrived with its last byte.
        try:
            doc = orjson.loads(body)
        except orjson.JSONDecodeError:
            return Answer(0, self.first_ns, done_ns, None, "a 200 answer that is neither a stream nor JSON")
        text = text_field(bytes(body)) if self.GENERATES else b""
        stream = Stream([done_ns] if text else [], text, *self.usage_of(doc), events=1)
        return Answer(200, self.first_ns, done_ns, stream=stream)


class _PooledConn(_StreamConn):
    GENERATES = False  # vectors or scores: a rerank answer's `text` is a document echoed, never a token


class OpenAiStreamTransport(RawHttpTransport):
    """Completions (or chat completions) to an OpenAI-compatible server; bodies are the requests' JSON."""

    conn_factory = _StreamConn

    def answer_of(self, result: Any) -> Answer:
        return cast(Answer, result)


class PooledTransport(OpenAiStreamTransport):
    """Embeddings or rerank requests, answered whole with nothing generated (no first token)."""

    conn_factory = _PooledConn
