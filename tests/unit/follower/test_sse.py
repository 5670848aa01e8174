"""The streaming parser: a server-sent event stream (chunk-encoded or not) split at every byte boundary gives the same
events, each stamped with the arrival of the bytes that completed it."""

from __future__ import annotations

import pytest

from follower.protocols.transports.sse import DONE, Dechunker, SseParser, StreamError

EVENTS = [
    b'{"id":"c1","choices":[{"index":0,"text":" kalo","finish_reason":null}]}',
    b'{"id":"c1","choices":[{"index":0,"text":"\\n\\nmi","finish_reason":null}]}',
    b'{"id":"c1","choices":[{"index":0,"text":"","finish_reason":"length"}],"usage":{"prompt_tokens":5,"completion_tokens":2}}',
    DONE,
]
# What a server sends: one event per engine step, a keep-alive comment, CRLF line ends on one event.
STREAM = (b"data: " + EVENTS[0] + b"\n\n" + b": keep-alive\n\n" + b"data: " + EVENTS[1] + b"\r\n\r\n"
          + b"data: " + EVENTS[2] + b"\n\n" + b"data: " + EVENTS[3] + b"\n\n")  # fmt: skip
SEPARATORS = [2, 4, 2, 2]  # the blank line after each event, in bytes


def chunked(payload: bytes, sizes: list[int]) -> bytes:
    out, at = b"", 0
    for size in sizes:
        part = payload[at : at + size]
        if part:
            out += f"{len(part):x}\r\n".encode() + part + b"\r\n"
        at += size
    return out + (f"{len(payload) - at:x}\r\n".encode() + payload[at:] + b"\r\n" if at < len(payload) else b"") + b"0\r\n\r\n"


def parse(stream: bytes, cuts: list[int], *, chunk_encoded: bool) -> list[tuple[int, bytes]]:
    parser, dechunker = SseParser(), Dechunker()
    events, last = [], 0
    for ns, cut in enumerate([*cuts, len(stream)]):
        piece = stream[last:cut]
        last = cut
        events += parser.feed(dechunker.feed(piece) if chunk_encoded else piece, ns)
    assert not chunk_encoded or dechunker.finished
    return events


@pytest.mark.parametrize("chunk_encoded", [False, True])
def test_a_stream_split_at_every_byte_gives_the_same_events(chunk_encoded: bool) -> None:
    wire = chunked(STREAM, [7, 64, 3, 200]) if chunk_encoded else STREAM
    whole = parse(wire, [], chunk_encoded=chunk_encoded)
    assert [data for _, data in whole] == EVENTS
    for cut in range(1, len(wire)):
        got = parse(wire, [cut], chunk_encoded=chunk_encoded)
        assert [data for _, data in got] == EVENTS, cut
        # An event is stamped with the piece that completed it: the first piece if it ends past the event's end.
        if not chunk_encoded:
            ends = [wire.find(e) + len(e) + sep for e, sep in zip(EVENTS, SEPARATORS, strict=True)]
            assert [ns for ns, _ in got] == [0 if cut >= end else 1 for end in ends], cut


def test_bytes_fed_one_at_a_time_stamp_each_event_with_its_last_byte() -> None:
    got = parse(STREAM, list(range(1, len(STREAM))), chunk_encoded=False)
    ends = [STREAM.find(b"data: " + e) + len(b"data: " + e) for e in EVENTS]
    # The event is complete at its blank line: the byte that ends its separator.
    assert [data for _, data in got] == EVENTS
    assert [ns for ns, _ in got] == [end + sep - 1 for end, sep in zip(ends, SEPARATORS, strict=True)]


def test_broken_framing_is_named() -> None:
    with pytest.raises(StreamError, match="chunk size"):
        Dechunker().feed(b"zz\r\ndata")
    with pytest.raises(StreamError, match="CRLF"):
        Dechunker().feed(b"2\r\nabXY")
    with pytest.raises(StreamError, match="longer than"):
        SseParser(max_event=100).feed(b"data: " + b"x" * 200, 0)


def test_a_chunked_answer_ends_at_the_blank_line_after_its_last_chunk_not_before() -> None:
    """A server may send the blank line that ends a chunked answer apart from its zero-size chunk (llama.cpp does):
    the answer is not finished before it, so it is not taken for the start of the next answer on the connection."""
    dechunker = Dechunker()
    assert dechunker.feed(b"5\r\nhello\r\n0\r\n") == b"hello" and not dechunker.finished
    assert dechunker.feed(b"\r\n") == b"" and dechunker.finished
    fast = Dechunker()  # the whole answer in one read: finished at once
    assert fast.feed(b"5\r\nhello\r\n0\r\n\r\n") == b"hello" and fast.finished
    trailers = Dechunker()  # trailer fields after the last chunk are not payload; the blank line still ends it
    assert trailers.feed(b"2\r\nhi\r\n0\r\nX-Checksum: 1\r\n") == b"hi" and not trailers.finished
    assert trailers.feed(b"\r\n") == b"" and trailers.finished
