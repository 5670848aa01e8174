"""Anthropic's Messages events and OpenAI's Responses events, written as their documentation gives them, read by the
streaming client's connection as they arrive: one token event per text delta (stamped with the read that completed
it), the text, and the counts from the usage events; nothing else counted as a token."""

from __future__ import annotations

import json
from typing import Any

from follower.protocols.transports.base import Answer
from follower.protocols.transports.llm_events import _MessagesConn, _ResponsesConn, input_output_usage

MESSAGES = [
    (
        "message_start",
        {
            "type": "message_start",
            "message": {
                "id": "msg_1",
                "type": "message",
                "role": "assistant",
                "content": [],
                "model": "m",
                "stop_reason": None,
                "usage": {"input_tokens": 25, "output_tokens": 1},
            },
        },
    ),
    ("content_block_start", {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
    ("ping", {"type": "ping"}),
    ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hello"}}),
    ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": ' "you"'}}),
    ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": ""}}),
    (
        "content_block_delta",
        {"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "{"}},
    ),
    ("content_block_stop", {"type": "content_block_stop", "index": 0}),
    (
        "message_delta",
        {"type": "message_delta", "delta": {"stop_reason": "max_tokens", "stop_sequence": None}, "usage": {"output_tokens": 3}},
    ),
    ("message_stop", {"type": "message_stop"}),
]
RESPONSES = [
    ("response.created", {"type": "response.created", "response": {"id": "resp_1", "status": "in_progress", "output": []}}),
    (
        "response.output_item.added",
        {
            "type": "response.output_item.added",
            "output_index": 0,
            "item": {"type": "message", "role": "assistant", "content": []},
        },
    ),
    ("response.content_part.added", {"type": "response.content_part.added", "part": {"type": "output_text", "text": ""}}),
    ("response.output_text.delta", {"type": "response.output_text.delta", "item_id": "m", "delta": "Hi"}),
    ("response.output_text.delta", {"type": "response.output_text.delta", "item_id": "m", "delta": " there"}),
    ("response.output_text.delta", {"type": "response.output_text.delta", "item_id": "m", "delta": ""}),
    ("response.output_text.done", {"type": "response.output_text.done", "item_id": "m", "text": "Hi there"}),
    (
        "response.completed",
        {
            "type": "response.completed",
            "response": {
                "id": "resp_1",
                "status": "completed",
                "output": [{"type": "message", "content": [{"type": "output_text", "text": "Hi there"}]}],
                "usage": {"input_tokens": 12, "output_tokens": 3, "total_tokens": 15},
            },
        },
    ),
]


class _Pool:
    streams_end_connections = False  # the pool has not seen a server end a connection after a stream

    def keep_alive(self, conn: Any, timeout_ns: int) -> None:
        return None

    def release(self, conn: Any) -> None:
        return None


class _Waiter:
    def __init__(self) -> None:
        self.result: Answer | None = None

    def done(self) -> bool:
        return self.result is not None

    def set_result(self, result: Answer) -> None:
        self.result = result


def test_messages_text_deltas_are_the_token_events_and_the_counts_come_from_start_and_delta(monkeypatch: Any) -> None:
    answer = _stream_of(_MessagesConn, MESSAGES, monkeypatch)
    stream = answer.stream
    assert answer.status == 200 and stream is not None
    # the three text deltas (an empty one too: a token whose bytes complete no character yet), not the tool input delta
    assert stream.events_ns == [5, 6, 7]  # the head was read at 1, event k at k + 2: the deltas are events 3, 4 and 5
    assert stream.text == b'Hello \\"you\\"' and (stream.prompt_tokens, stream.completion_tokens) == (25, 3)
    assert stream.events == len(MESSAGES)


def test_responses_output_text_deltas_are_the_token_events_and_the_counts_come_from_completed(monkeypatch: Any) -> None:
    answer = _stream_of(_ResponsesConn, RESPONSES, monkeypatch)
    stream = answer.stream
    assert answer.status == 200 and stream is not None
    assert stream.events_ns == [5, 6, 7] and stream.text == b"Hi there"  # not the .done event's whole text again
    assert (stream.prompt_tokens, stream.completion_tokens) == (12, 3)


def test_an_unstreamed_answer_of_either_api_gives_its_text_and_counts() -> None:
    message = {"content": [{"type": "text", "text": "Hello"}], "usage": {"input_tokens": 9, "output_tokens": 2}}
    response = {
        "output": [{"type": "message", "content": [{"type": "output_text", "text": "Hi"}]}],
        "usage": {"input_tokens": 7, "output_tokens": 1},
    }
    assert input_output_usage(message) == (9, 2) and input_output_usage(response) == (7, 1)
    assert input_output_usage({"message": message}) == (9, 2) and input_output_usage({"response": response}) == (7, 1)
    assert input_output_usage({"usage": None}) == (None, None)


def test_a_messages_prompt_counts_what_the_prompt_cache_read_and_wrote_too() -> None:
    """Anthropic's usage leaves the tokens read from or written to its prompt cache out of input_tokens (as llama.cpp's
    and vLLM's Messages APIs do): the prompt is the three together. Responses' input_tokens holds its cached ones."""
    usage = {"input_tokens": 3, "cache_read_input_tokens": 19, "cache_creation_input_tokens": 2, "output_tokens": 0}
    start = {"type": "message_start", "message": {"usage": usage}}
    assert input_output_usage(start) == (24, 0)
    completed = {"response": {"usage": {"input_tokens": 22, "output_tokens": 5, "input_tokens_details": {"cached_tokens": 21}}}}
    assert input_output_usage(completed) == (22, 5)


def _stream_of(conn_type: type, events: list[tuple[str, dict[str, Any]]], monkeypatch: Any) -> Answer:
    """Feed the events to a connection of `conn_type`, read k at fake time k, and take the answer it completes."""
    import follower.protocols.transports.openai_stream as stream

    clock = iter(range(1, 10_000))
    monkeypatch.setattr(stream, "_monotonic_ns", lambda: next(clock))
    conn = conn_type(_Pool())
    waiter = _Waiter()
    conn.waiter = waiter
    conn.transport = _Transport()
    conn.data_received(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
    for name, doc in events:
        payload = f"event: {name}\ndata: {json.dumps(doc, separators=(',', ':'))}\n\n".encode()
        conn.data_received(b"%x\r\n%s\r\n" % (len(payload), payload))
    conn.data_received(b"0\r\n\r\n")
    assert waiter.result is not None
    return waiter.result


class _Transport:
    def close(self) -> None:
        return None

    def is_closing(self) -> bool:
        return False
