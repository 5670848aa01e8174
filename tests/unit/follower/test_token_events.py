"""Which streamed events are token events (TTFT and ITL are timed from them): every event with choices, its text
empty or not, but not a chat answer's role announcement, a closing event with nothing generated, or the usage event."""

from __future__ import annotations

import pytest

from follower.protocols.transports.openai_stream import is_event_stream, is_token_event, text_field


@pytest.mark.parametrize(
    ("event", "token"),
    [
        (b'{"choices":[{"index":0,"text":" kalo","finish_reason":null}]}', True),
        (b'{"choices":[{"index":0,"text":"","finish_reason":null}]}', True),  # a token ending inside a character
        (b'{"choices": [ {"index":0,"text":"","logprobs":null,"finish_reason":null}]}', True),
        (b'{"choices":[{"index":0,"delta":{"content":""},"finish_reason":null}]}', True),  # chat, the same
        (b'{"choices":[{"index":0,"text":"!","finish_reason":"length"}]}', True),  # the last token closes
        (b'{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}', False),  # chat's role announcement
        (b'{"choices":[{"index":0,"text":"","finish_reason":"length"}]}', False),  # a closing event of its own
        (b'{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}', False),  # llama.cpp's chat close
        (b'{"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":2}}', False),  # the usage event
        (b'{"choices": [ ],"usage":null}', False),
        (b'{"error":{"message":"overloaded"}}', False),
    ],
)
def test_token_events(event: bytes, token: bool) -> None:
    assert (bool(text_field(event)) or is_token_event(event)) is token


@pytest.mark.parametrize(
    ("start", "stream"),
    [
        (b"data: {", True),
        (b"\n: keep-alive\n", True),
        (b"event: x", True),
        (b"dat", None),  # a read that ends inside `data:`: the next bytes decide
        (b"  ", None),
        (b'{"choices"', False),
        (b"dax", False),
    ],
)
def test_an_answer_is_an_event_stream_by_its_first_bytes_however_they_are_split(start: bytes, stream: bool | None) -> None:
    assert is_event_stream(start) is stream
