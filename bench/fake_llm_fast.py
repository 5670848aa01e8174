"""A fast fake OpenAI-compatible streaming server for bench/llm.py's client ceiling: no model, fixed timing.

Each request to /v1/completions or /v1/chat/completions gets `max_tokens` tokens (`max_completion_tokens` for chat),
the first --ttft-ms after it arrives and the rest --gap-ms apart, as server-sent events in HTTP/1.1 chunked framing
with a final usage event and `[DONE]`; `stream: false` gets one JSON answer at the same end time. Built to cost the
server as little as possible per token so that the clients, not the server, reach their limit first: raw asyncio
protocols on uvloop, every event pre-encoded, and one timer per tick that writes the due token to every open stream
(not one timer per stream per token). The test suite's fake (tests/integration/follower/fake_llm_server.py) writes
deliberately odd pieces to exercise framing; this one writes whole events.

With --stats FILE it appends, per streamed answer, its own count and timing as a JSON line: the prompt's words, the
tokens written, and when it wrote the first and the last (its loop's clock, seconds): what a client's received rate
is measured against.

Usage: python bench/fake_llm_fast.py --port P [--ttft-ms 1] [--gap-ms 2] [--stats FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time

MAX_TOKENS = 8192


def _chunk(payload: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(payload), payload)


def _event(obj: object) -> bytes:
    return _chunk(b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n")


COMPLETION_EVENTS = [
    _event(
        {
            "id": "x",
            "object": "text_completion",
            "model": "fake",
            "choices": [{"index": 0, "text": f" w{i}", "finish_reason": None}],
        }
    )
    for i in range(MAX_TOKENS)
]
CHAT_EVENTS = [
    _event(
        {
            "id": "x",
            "object": "chat.completion.chunk",
            "model": "fake",
            "choices": [{"index": 0, "delta": {"content": f" w{i}"}, "finish_reason": None}],
        }
    )
    for i in range(MAX_TOKENS)
]
HEAD_STREAM = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
JSON_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
DONE = _chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n"


class Stream:
    __slots__ = ("transport", "events", "n", "i", "due", "tail", "prompt", "first")

    def __init__(self, transport: asyncio.Transport, events: list[bytes], n: int, due: float, tail: bytes, prompt: int) -> None:
        self.transport, self.events, self.n, self.i, self.due, self.tail = transport, events, n, 0, due, tail
        self.prompt, self.first = prompt, 0.0


class Ticker:
    """Writes every open stream's due token once per gap: one timer for all streams."""

    def __init__(self, loop: asyncio.AbstractEventLoop, gap_s: float, stats: str | None = None) -> None:
        self.loop, self.gap_s = loop, gap_s
        self.stats = open(stats, "a", buffering=1) if stats else None  # noqa: SIM115 - open for the server's life
        self.streams: list[Stream] = []
        self.running = False

    def add(self, stream: Stream) -> None:
        self.streams.append(stream)
        if not self.running:
            self.running = True
            self.loop.call_at(stream.due, self.tick)

    def tick(self) -> None:
        now = self.loop.time()
        keep: list[Stream] = []
        for s in self.streams:
            if s.transport.is_closing():
                continue
            if s.due <= now:
                s.transport.write(s.events[s.i])
                s.first = now if s.i == 0 else s.first
                s.i += 1
                if s.i >= s.n:
                    s.transport.write(s.tail)
                    if self.stats is not None:
                        line = {"prompt_words": s.prompt, "tokens": s.n, "first_s": s.first, "last_s": now}
                        self.stats.write(json.dumps(line) + "\n")
                    continue
                s.due += self.gap_s
            keep.append(s)
        self.streams = keep
        if keep:
            self.loop.call_at(min(now + self.gap_s, min(s.due for s in keep)), self.tick)
        else:
            self.running = False


class Server(asyncio.Protocol):
    def __init__(self, ticker: Ticker, ttft_s: float) -> None:
        self.ticker, self.ttft_s = ticker, ttft_s
        self.buf = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while True:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self.buf[:end].decode("latin-1")
            length = 0
            for line in head.split("\r\n")[1:]:
                name, _, value = line.partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value)
            if len(self.buf) < end + 4 + length:
                return
            body, self.buf = self.buf[end + 4 : end + 4 + length], self.buf[end + 4 + length :]
            self.handle(head.split(" ", 2), body)

    def handle(self, request_line: list[str], body: bytes) -> None:
        assert self.transport is not None
        method, path = request_line[0], request_line[1]
        if method == "GET":
            payload = json.dumps({"object": "list", "data": [{"id": "fake", "object": "model"}]}).encode()
            self.transport.write(JSON_HEAD % len(payload) + payload)
            return
        req = json.loads(body or b"{}")
        chat = path.endswith("/chat/completions")
        n = int(req.get("max_completion_tokens") or req.get("max_tokens") or 16)
        n = max(1, min(n, MAX_TOKENS))
        prompt = req.get("messages") if chat else req.get("prompt")
        prompt_tokens = len(json.dumps(prompt).split()) if prompt else 1
        usage = {"prompt_tokens": prompt_tokens, "completion_tokens": n, "total_tokens": prompt_tokens + n}
        loop = self.ticker.loop
        if not req.get("stream"):
            text = "".join(f" w{i}" for i in range(n))
            choice = {"index": 0, "message": {"role": "assistant", "content": text}} if chat else {"index": 0, "text": text}
            payload = json.dumps(
                {"id": "x", "model": "fake", "choices": [{**choice, "finish_reason": "length"}], "usage": usage}
            ).encode()
            answer = JSON_HEAD % len(payload) + payload
            loop.call_later(self.ttft_s + self.ticker.gap_s * (n - 1), self.transport.write, answer)
            return
        self.transport.write(HEAD_STREAM)
        tail = _event({"id": "x", "model": "fake", "choices": [], "usage": usage}) + DONE
        events = CHAT_EVENTS if chat else COMPLETION_EVENTS
        self.ticker.add(Stream(self.transport, events, n, loop.time() + self.ttft_s, tail, prompt_tokens))


async def serve(port: int, ttft_s: float, gap_s: float, stats: str | None = None) -> None:
    loop = asyncio.get_running_loop()
    ticker = Ticker(loop, gap_s, stats)
    server = await loop.create_server(lambda: Server(ticker, ttft_s), "127.0.0.1", port, backlog=4096)
    print(f"fake LLM on 127.0.0.1:{port} ({time.strftime('%H:%M:%S')})", flush=True)
    await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--ttft-ms", type=float, default=1.0)
    parser.add_argument("--gap-ms", type=float, default=2.0)
    parser.add_argument("--stats", help="append each streamed answer's count and timing to this file (JSON lines)")
    args = parser.parse_args()
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    asyncio.run(serve(args.port, args.ttft_ms / 1000, args.gap_ms / 1000, args.stats))


if __name__ == "__main__":
    main()
