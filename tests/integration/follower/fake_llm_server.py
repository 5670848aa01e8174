"""A fake OpenAI-compatible completions server with no model: each request gets `max_tokens` tokens (one word each)
`--gap-ms` apart after `--ttft-ms`, streamed as server-sent events with a final usage event, or as one JSON answer.
Events are written in deliberately odd pieces (an event split across writes, two events in one) so the client's
framing is exercised. For the streaming transport's tests and bench/llm.py's client ceiling."""

from __future__ import annotations

import argparse
import asyncio
import json

from aiohttp import web

# Texts whose JSON escapes the client must get right: a quote, a trailing backslash (an escaped backslash right before
# the closing quote), a newline, a non-ASCII letter.
WORDS = (' say "hi"', " c\\", "\n", " é")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--ttft-ms", type=float, default=5.0)
    parser.add_argument("--gap-ms", type=float, default=2.0)
    args = parser.parse_args()

    async def completions(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        n = int(body.get("max_tokens", 16))
        prompt_tokens = len(str(body.get("prompt", "")).split()) + 1
        words = [WORDS[i % len(WORDS)] if i % 5 == 0 else f" w{i}" for i in range(n)]
        if not body.get("stream"):
            await asyncio.sleep((args.ttft_ms + args.gap_ms * max(n - 1, 0)) / 1000)
            return web.json_response({"choices": [{"index": 0, "text": "".join(words), "finish_reason": "length"}],
                                      "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": n}})  # fmt: skip
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await asyncio.sleep(args.ttft_ms / 1000)
        # As vLLM does for a token whose bytes do not complete a character: an event with empty text, the bytes coming
        # with the next token's event (every `fake_empty_every`-th token); and optionally a closing event of its own.
        empty_every = int(body.get("fake_empty_every", 0))
        # A server that batches its stream: `fake_tokens_per_event` tokens in each event; with continuous usage
        # asked (vLLM's stream_options.continuous_usage_stats) every event carries the count so far.
        per_event = int(body.get("fake_tokens_per_event", 1))
        continuous = bool((body.get("stream_options") or {}).get("continuous_usage_stats"))
        if per_event > 1:
            words = ["".join(words[k : k + per_event]) for k in range(0, n, per_event)]
        held, sent = "", 0
        for i, word in enumerate(words):
            if empty_every and i % empty_every == empty_every - 1 and i < n - 1:
                held, word = word, ""
            elif held:
                held, word = "", held + word
            sent = min(n, sent + per_event)
            choice = {"index": 0, "text": word, "finish_reason": None}
            chunk: dict[str, object] = {"id": "x", "object": "text_completion", "choices": [choice]}
            if continuous:
                chunk["usage"] = {"prompt_tokens": prompt_tokens, "completion_tokens": sent, "total_tokens": prompt_tokens + sent}
            event = b"data: " + json.dumps(chunk, separators=(",", ":")).encode() + b"\n\n"
            if i % 3 == 1:  # an event split across two writes
                await response.write(event[:7])
                await response.write(event[7:])
            else:
                await response.write(event)
            if i < len(words) - 1:
                await asyncio.sleep(args.gap_ms / 1000)
        if body.get("fake_closing_event"):
            await response.write(b'data: {"choices":[{"index":0,"text":"","finish_reason":"length"}]}\n\n')
        usage = {"prompt_tokens": prompt_tokens, "completion_tokens": n, "total_tokens": prompt_tokens + n}
        tail = b"data: " + json.dumps({"choices": [], "usage": usage}).encode() + b"\n\ndata: [DONE]\n\n"
        await response.write(tail)  # two events in one write
        await response.write_eof()
        return response

    async def models(request: web.Request) -> web.Response:
        return web.json_response({"data": [{"id": "fake"}]})

    app = web.Application(client_max_size=16 * 2**20)  # a long-context prompt is ~700 KB
    app.router.add_post("/v1/completions", completions)
    app.router.add_get("/v1/models", models)
    web.run_app(app, host="127.0.0.1", port=args.port, print=None, access_log=None, backlog=4096)


if __name__ == "__main__":
    main()
