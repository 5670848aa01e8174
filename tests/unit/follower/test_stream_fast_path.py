"""The streaming client's fast path (one chunk holding one one-line event, read whole: the usual read of a streamed token)
gives exactly what the general path gives, on the usual stream and on every read it must leave to the general path."""

from __future__ import annotations

import json
from typing import Any

import pytest

import follower.protocols.transports.openai_stream as stream
from follower.protocols.transports.base import Answer
from follower.protocols.transports.openai_stream import _StreamConn

HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"


class _Transport:
    def close(self) -> None:
        pass

    def get_extra_info(self, name: str) -> Any:
        return ("127.0.0.1", 40000)


class _Pool:
    streams_end_connections = False  # the pool has not seen a server end a connection after a stream

    def keep_alive(self, conn: object, timeout_ns: int) -> None:
        pass

    def release(self, conn: object) -> None:
        pass


class _Waiter:
    def __init__(self) -> None:
        self.result: Answer | None = None

    def done(self) -> bool:
        return self.result is not None

    def set_result(self, answer: Answer) -> None:
        self.result = answer

    def set_exception(self, exc: BaseException) -> None:
        raise AssertionError(f"the answer failed: {exc}")


def chunk(payload: bytes, extension: bytes = b"") -> bytes:
    return b"%x%s\r\n%s\r\n" % (len(payload), extension, payload)


def event(obj: object, end: bytes = b"\n\n", field: bytes = b"data: ") -> bytes:
    return field + json.dumps(obj, separators=(",", ":")).encode() + end


def token(i: int, **extra: object) -> dict[str, object]:
    return {"id": "x", "choices": [{"index": 0, "text": f" w{i}", "finish_reason": None}], **extra}


USAGE = event({"id": "x", "choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 6}})
END = chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n"


def read(reads: list[bytes], *, fast: bool) -> tuple[Answer, int]:
    """The answer one connection makes of `reads` (read k stamped k ns), and how many reads took the fast path (a read
    that brought events without passing through the answer's reader)."""
    conn = _StreamConn(_Pool())  # type: ignore[arg-type]
    conn.connection_made(_Transport())  # type: ignore[arg-type]
    waiter = _Waiter()
    conn.waiter = waiter
    took = 0
    clock = stream._monotonic_ns
    try:
        for ns, data in enumerate(reads, start=1):
            conn.steady = conn.steady and fast
            events, received = conn.events, conn.reader.received
            stream._monotonic_ns = lambda ns=ns: ns  # type: ignore[misc]
            conn.data_received(data)
            took += conn.events > events and conn.reader.received == received
    finally:
        stream._monotonic_ns = clock
    assert waiter.result is not None, "the answer did not complete"
    return waiter.result, took


def same(reads: list[bytes]) -> int:
    """Both paths give the same answer; how many reads the fast one took."""
    fast, took = read(reads, fast=True)
    general, none = read(reads, fast=False)
    assert none == 0
    assert (fast.status, fast.first_ns, fast.done_ns > 0) == (general.status, general.first_ns, True)
    a, b = fast.stream, general.stream
    assert a is not None and b is not None
    assert (a.events_ns, a.text, a.prompt_tokens, a.completion_tokens, a.events) == (
        b.events_ns,
        b.text,
        b.prompt_tokens,
        b.completion_tokens,
        b.events,
    )
    return took


def test_the_usual_stream_takes_the_fast_path_after_its_first_event_and_gives_the_same_answer() -> None:
    reads = [HEAD, *(chunk(event(token(i))) for i in range(6)), chunk(USAGE) + END]
    assert same(reads) == 5  # the first event's read settles the stream; the last read holds three chunks
    answer, _ = read(reads, fast=True)
    assert answer.stream is not None and answer.stream.events_ns == [2, 3, 4, 5, 6, 7]
    assert json.loads(b'"' + answer.stream.text + b'"') == " w0 w1 w2 w3 w4 w5"
    assert (answer.stream.prompt_tokens, answer.stream.completion_tokens, answer.stream.events) == (3, 6, 7)


@pytest.mark.parametrize(
    "odd",
    [
        pytest.param(chunk(event(token(9), end=b"\r\n\r\n")), id="CRLF line ends"),
        pytest.param(chunk(event(token(9)) + event(token(10))), id="two events in one chunk"),
        pytest.param(chunk(event(token(9))) + chunk(event(token(10))), id="two chunks in one read"),
        pytest.param(chunk(event(token(9)), extension=b";x=y"), id="a chunk extension"),
        pytest.param(chunk(event(token(9), field=b"data:")), id="data: without its space"),
        pytest.param(chunk(b": keep-alive\n\n"), id="a comment"),
        pytest.param(chunk(b"event: message\n" + event(token(9))), id="another field"),
        pytest.param(chunk(event(token(9), end=b"\r\n")[:-2] + b"\r\n\n"), id="a CR inside the line"),
        pytest.param(chunk(event({"id": "x", "choices": [{"index": 0, "text": "", "finish_reason": None}]})), id="empty text"),
        pytest.param(chunk(event(token(9, usage={"completion_tokens": 4}))), id="a running count"),
        pytest.param(chunk(event({"choices": [{"delta": {"role": "assistant"}}]})), id="a role"),
    ],
)
def test_a_read_the_fast_path_must_not_frame_gives_what_the_general_path_gives(odd: bytes) -> None:
    before = [HEAD, chunk(event(token(0))), chunk(event(token(1)))]
    after = [chunk(event(token(2))), chunk(USAGE) + END]
    same([*before, odd, *after])


def test_an_event_split_across_reads_and_chunks_gives_the_same_answer() -> None:
    whole = chunk(event(token(3)))
    split = [whole[:5], whole[5:40], whole[40:]]
    two_chunks = chunk(event(token(4))[:30]) + chunk(event(token(4))[30:])
    same([HEAD, chunk(event(token(0))), chunk(event(token(1))), *split, two_chunks, chunk(event(token(5))), END])
    # A chunk whose size says more than the read holds: the rest comes with the next read.
    tail = chunk(event(token(6)))
    same([HEAD, chunk(event(token(0))), chunk(event(token(1))), tail[:-3], tail[-3:] + END])
