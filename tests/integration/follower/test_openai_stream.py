"""The streaming transport against a fake OpenAI-compatible server of known timing: every token event is caught with
its arrival time, the text survives its JSON escapes, the server's usage is read, a non-streamed answer and an error
come back as such, and the connection is reused between requests."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from common.procs import SupervisedProcess, free_port, http_ready
from follower.protocols.transports.base import Answer
from follower.protocols.transports.openai_stream import OpenAiStreamTransport

pytestmark = pytest.mark.integration

SERVER = Path(__file__).with_name("fake_llm_server.py")
TTFT_MS, GAP_MS = 20.0, 10.0


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    port = free_port()
    argv = [sys.executable, str(SERVER), "--port", str(port), "--ttft-ms", str(TTFT_MS), "--gap-ms", str(GAP_MS)]
    log = tmp_path_factory.mktemp("fake-llm") / "server.log"
    with SupervisedProcess(argv, name="fake LLM server", log_path=log) as proc:
        proc.wait_ready(http_ready(f"http://127.0.0.1:{port}/v1/models"), timeout_s=30)
        yield f"http://127.0.0.1:{port}/v1/completions"


def _body(tokens: int, *, stream: bool = True, **extra: object) -> bytes:
    return json.dumps({"model": "fake", "prompt": "a b c", "max_tokens": tokens, "stream": stream,
                       "stream_options": {"include_usage": True}, **extra}).encode()  # fmt: skip


async def _requests(url: str, bodies: list[bytes]) -> tuple[list[Answer], int]:
    async with OpenAiStreamTransport(url, max_concurrency=4, timeout_s=30) as transport:
        answers = [await transport.request(transport.encode(b)) for b in bodies]
        return answers, len(transport.session._all)


def test_each_token_event_arrives_stamped_and_the_text_and_usage_come_through(url: str) -> None:
    answers, connections = asyncio.run(_requests(url, [_body(24), _body(3)]))
    first, short = answers
    assert first.status == 200 and first.stream is not None, first.error
    stream = first.stream
    assert len(stream.events_ns) == 24 and stream.events == 25  # 24 with text, then the usage event
    assert (stream.prompt_tokens, stream.completion_tokens) == (4, 24)
    gaps_ms = np.diff(stream.events_ns) / 1e6
    # The server sleeps GAP_MS between tokens: the client sees each token when it arrives, not all at the end.
    assert np.median(gaps_ms) == pytest.approx(GAP_MS, abs=3.0) and gaps_ms.min() > 0.3 * GAP_MS, gaps_ms
    assert first.first_ns <= stream.events_ns[0] <= stream.events_ns[-1] <= first.done_ns
    text = json.loads(b'"' + stream.text + b'"')
    assert text.startswith(' say "hi" w1 w2') and " c\\ w6" in text and "\n w11" in text and " é w16" in text
    assert short.stream is not None and len(short.stream.events_ns) == 3 and short.stream.completion_tokens == 3
    assert connections == 1  # the keep-alive connection carried both


def test_a_token_event_with_empty_text_is_timed_and_a_closing_event_is_not(url: str) -> None:
    """vLLM sends every token as an event; one whose bytes do not complete a character carries empty text. Each is a
    token's arrival: dropping it would merge two gaps into one (ITL) or start TTFT a token late."""
    (answer,), _ = asyncio.run(_requests(url, [_body(24, fake_empty_every=4, fake_closing_event=True)]))
    stream = answer.stream
    assert answer.status == 200 and stream is not None, answer.error
    assert len(stream.events_ns) == 24 == stream.completion_tokens  # 5 of them empty; the closing event not a token
    assert stream.events == 26  # 24 token events, the closing event, the usage event
    gaps_ms = np.diff(stream.events_ns) / 1e6
    assert np.median(gaps_ms) == pytest.approx(GAP_MS, abs=3.0) and gaps_ms.max() < 1.8 * GAP_MS + 5, gaps_ms
    text = json.loads(b'"' + stream.text + b'"')
    assert text.startswith(' say "hi" w1 w2') and " w23" in text  # the held bytes came with the next event


def test_an_event_carrying_several_tokens_is_split_by_the_servers_count_in_each_event(url: str) -> None:
    """A server that batches its stream sends 3 tokens an event. Asked for its usage in every event (continuous usage),
    each event counts as the tokens it brought, at its time: 24 arrivals, two of every three 0 ms after the one before.
    Not asked, each event is one token: 8 arrivals for 24 tokens, shown as fewer events than tokens."""
    asked = {"include_usage": True, "continuous_usage_stats": True}
    (split, whole), _ = asyncio.run(
        _requests(url, [_body(24, fake_tokens_per_event=3, stream_options=asked), _body(24, fake_tokens_per_event=3)])
    )
    assert split.stream is not None and whole.stream is not None, (split.error, whole.error)
    assert len(split.stream.events_ns) == 24 == split.stream.completion_tokens and split.stream.prompt_tokens == 4
    gaps_ms = np.diff(split.stream.events_ns) / 1e6
    assert (gaps_ms == 0).sum() == 16 and np.median(gaps_ms[gaps_ms > 0]) == pytest.approx(GAP_MS, abs=3.0), gaps_ms
    assert len(whole.stream.events_ns) == 8 and whole.stream.completion_tokens == 24
    assert json.loads(b'"' + split.stream.text + b'"') == json.loads(b'"' + whole.stream.text + b'"')


def test_a_non_streamed_answer_and_an_error_come_back_as_such(url: str) -> None:
    (plain, bad), _ = asyncio.run(_requests(url, [_body(6, stream=False), b"{not json"]))
    assert plain.status == 200 and plain.stream is not None
    assert plain.stream.completion_tokens == 6 and len(plain.stream.events_ns) == 1
    assert plain.stream.events_ns[0] == plain.done_ns  # its text came with its last byte
    assert bad.status >= 400 and bad.stream is None and bad.error is not None and bad.error.startswith(f"HTTP {bad.status}")


def test_a_closed_loop_of_streamed_requests_keeps_each_requests_tokens_and_body(url: str) -> None:
    from follower.loadgen.closedloop import drive_closed
    from follower.protocols import Endpoint

    lengths = [3, 7, 12]
    records = drive_closed(
        Endpoint("openai", url), [_body(n) for n in lengths], concurrency=3, duration_ns=600_000_000, timeout_s=30
    )
    assert records.llm is not None and records.body is not None and len(records) >= 6
    assert np.all(np.diff(records.sent_ns) >= 0)  # sorted by send, with their tokens and bodies in the same order
    ok = records.ok
    assert ok.all(), records.error_sample
    # Every request's stream carried the length its own body asked for: the columns follow the send order.
    asked = np.array(lengths)[records.body]
    assert np.array_equal(records.llm.completion_tokens, asked)
    assert [len(t) for t in records.llm.token_times if t is not None] == list(asked)
    assert set(records.body.tolist()) == {0, 1, 2}


@pytest.fixture(scope="module")
def fast_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The same fake with no gap between tokens: a long answer as fast as it can write it."""
    port = free_port()
    argv = [sys.executable, str(SERVER), "--port", str(port), "--ttft-ms", "1", "--gap-ms", "0"]
    log = tmp_path_factory.mktemp("fake-llm-fast") / "server.log"
    with SupervisedProcess(argv, name="fast fake LLM server", log_path=log) as proc:
        proc.wait_ready(http_ready(f"http://127.0.0.1:{port}/v1/models"), timeout_s=30)
        yield f"http://127.0.0.1:{port}/v1/completions"


def test_a_100k_token_prompt_and_a_4k_token_answer_come_through_whole(fast_url: str) -> None:
    """Long context: the prompt (built to 100,000 tokens by the model's tokenizer) is sent whole and counted so by
    the server, and each of the 4,000 token events is stamped as it arrives, in order, with the server's count. That
    the client receives them as fast as the server writes them is bench/llm.py section 4's figure."""
    import io as _io

    from benchfleet.generate.llmgen import LlamaSpec, generate
    from common.formats import hfbundle
    from common.spec.llm import LlmWorkload, TokenLengths
    from follower.loadgen.llmprompts import PromptMaker, llm_bodies

    data, _ = generate(LlamaSpec(layers=1, hidden=64, heads=2, kv_heads=2, intermediate=128, vocab=2048, context=512))
    maker = PromptMaker(*hfbundle.tokenizer_files(_io.BytesIO(data), limit_bytes=10**8))
    workload = LlmWorkload(prompt_tokens=TokenLengths(mean=100_000), output_tokens=TokenLengths(mean=4_000))
    bodies, _, held, asked = llm_bodies(workload, "fake", maker, 1, seed=1)
    assert held.tolist() == [100_000] and asked.tolist() == [4_000] and len(bodies[0]) > 500_000
    (answer,), _ = asyncio.run(_requests(fast_url, bodies))
    stream = answer.stream
    assert answer.status == 200 and stream is not None, answer.error
    assert (stream.prompt_tokens, stream.completion_tokens, len(stream.events_ns)) == (100_000, 4_000, 4_000)
    times = np.asarray(stream.events_ns)
    assert np.all(np.diff(times) >= 0) and answer.first_ns <= times[0] and times[-1] <= answer.done_ns


TOKEN_EVENT = b'data: {"choices":[{"index":0,"text":" tok","finish_reason":null}]}\n\n'
STREAM_HEAD = b"\r\n".join(
    [b"HTTP/1.1 200 OK", b"Content-Type: text/event-stream", b"Transfer-Encoding: chunked", b"Keep-Alive: timeout=5, max=100"]
) + b"\r\n\r\n"


def _chunk(payload: bytes) -> bytes:
    return f"{len(payload):x}\r\n".encode() + payload + b"\r\n"


async def _streaming_server(connections: list[int], *, idle_close_s: float | None = None) -> asyncio.Server:
    """A server of streamed answers whose Keep-Alive header says the connection stays, the blank line that ends each
    chunked answer coming apart from the zero-size chunk (as llama.cpp writes it). Without `idle_close_s` it then
    closes the connection, as llama.cpp does after every streamed answer; with it, it keeps the connection for the
    next request and closes it only once it has been idle that long (a keep-alive timeout)."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(1)
        try:
            while True:
                wait = asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), idle_close_s) if idle_close_s else None
                head = await (wait or reader.readuntil(b"\r\n\r\n"))
                lines = head.split(b"\r\n")
                await reader.readexactly(next(int(x.split(b":")[1]) for x in lines if x.lower().startswith(b"content-length")))
                writer.write(STREAM_HEAD)
                for _ in range(3):
                    writer.write(_chunk(TOKEN_EVENT))
                    await writer.drain()
                writer.write(_chunk(b"data: [DONE]\n\n") + b"0\r\n")
                await writer.drain()
                await asyncio.sleep(0.002)  # the blank line apart
                writer.write(b"\r\n")
                await writer.drain()
                if idle_close_s is None:
                    return
        except (asyncio.IncompleteReadError, ConnectionError, TimeoutError):
            pass
        finally:
            writer.close()

    return await asyncio.start_server(handle, "127.0.0.1", 0)


async def _back_to_back(server: asyncio.Server, requests: int, pause_after: int = -1) -> list[Answer]:
    """`requests` streamed requests one after the other (a pause of 0.5 s after the `pause_after`-th)."""
    port = server.sockets[0].getsockname()[1]
    async with OpenAiStreamTransport(f"http://127.0.0.1:{port}/v1/completions", max_concurrency=1, timeout_s=10) as t:
        wire, answers = t.encode(_body(3)), []
        for k in range(requests):
            try:
                answers.append(await t.request(wire))
            except ConnectionError as exc:
                answers.append(Answer(0, 0, 0, None, str(exc)))
            if k == pause_after:
                await asyncio.sleep(0.5)
        return answers


def test_a_server_that_ends_each_streamed_answers_connection_loses_no_request() -> None:
    """Back-to-back streamed requests (a session's turns with no think time) against such a server: the answer ends
    at its blank line, not before (the blank line is not read as the next answer's start), and once the server is
    seen closing a connection after a streamed answer the pool stops reusing them: every request is answered whole."""

    async def run() -> tuple[list[Answer], int]:
        connections: list[int] = []
        server = await _streaming_server(connections)
        try:
            return await _back_to_back(server, 12), len(connections)
        finally:
            server.close()
            await server.wait_closed()

    answers, connections = asyncio.run(run())
    assert [a.error for a in answers] == [None] * 12
    assert all(a.status == 200 and a.stream is not None and len(a.stream.events_ns) == 3 for a in answers)
    assert connections == 12  # a connection each: none was written on as the server closed it


def test_a_connection_closed_for_idling_past_the_servers_keep_alive_does_not_stop_reuse() -> None:
    """A server that keeps connections between streamed answers but closes one idle for 0.3 s: two requests, a pause
    of 0.5 s (the server closes the idle connection), three more. Its close is not taken for ending connections after
    streamed answers: the last three share one new connection."""

    async def run() -> tuple[list[Answer], int]:
        connections: list[int] = []
        server = await _streaming_server(connections, idle_close_s=0.3)
        try:
            return await _back_to_back(server, 5, pause_after=1), len(connections)
        finally:
            server.close()
            await server.wait_closed()

    answers, connections = asyncio.run(run())
    assert [a.error for a in answers] == [None] * 5
    assert connections == 2
