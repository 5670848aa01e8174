"""A strict stand-in of a vision model's OpenAI chat completions API, written from OpenAI's documented content parts:
each message's content is text or a list of parts, a part is {"type": "text", "text": str} or {"type": "image_url",
"image_url": {"url": str, "detail"?: "auto"|"low"|"high"}}, an image a data URL of a base64 PNG or JPEG. Anything else
is a 400 naming what is wrong. A PNG's size is read from its header; its tokens are counted as a ViT's 14-pixel
patches (ceil(w/14) x ceil(h/14)), the text's as its words plus one; each request's images and their digests are kept
(GET /seen). The answer streams `max_tokens` tokens with a final usage event, as the test suite's other fake does.

Usage: python vision_standin.py --port P
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import binascii
import hashlib
import json
import math
import struct

from aiohttp import web

PATCH = 14
DATA_URL = ("data:image/png;base64,", "data:image/jpeg;base64,")


class Refused(ValueError):
    pass


def _png_size(data: bytes) -> tuple[int, int]:
    if data[:8] != b"\x89PNG\r\n\x1a\n" or data[12:16] != b"IHDR":
        raise Refused("image: not a PNG (signature, IHDR)")
    return struct.unpack(">II", data[16:24])


def _content(content: object, where: str, seen: list[dict[str, object]]) -> tuple[int, int]:
    """(text words, image tokens) of one message's content."""
    if isinstance(content, str):
        return len(content.split()), 0
    if not isinstance(content, list) or not content:
        raise Refused(f"{where}.content: a string or a non-empty list of parts")
    words = tokens = 0
    for k, part in enumerate(content):
        at = f"{where}.content[{k}]"
        if not isinstance(part, dict) or part.get("type") not in ("text", "image_url"):
            raise Refused(f"{at}: a part is {{type: text|image_url, ...}}")
        if part["type"] == "text":
            if set(part) != {"type", "text"} or not isinstance(part["text"], str):
                raise Refused(f"{at}: a text part is {{type, text}}")
            words += len(part["text"].split())
            continue
        image = part.get("image_url")
        if set(part) != {"type", "image_url"} or not isinstance(image, dict) or not isinstance(image.get("url"), str):
            raise Refused(f"{at}: an image part is {{type, image_url: {{url}}}}")
        if set(image) - {"url", "detail"} or image.get("detail", "auto") not in ("auto", "low", "high"):
            raise Refused(f"{at}.image_url: url and an optional detail of auto, low or high")
        url = image["url"]
        if not url.startswith(DATA_URL):
            raise Refused(f"{at}.image_url.url: a data URL of a base64 PNG or JPEG")
        try:
            data = base64.b64decode(url.split(",", 1)[1], validate=True)
        except binascii.Error:
            raise Refused(f"{at}.image_url.url: not base64") from None
        width, height = _png_size(data)
        seen.append({"width": width, "height": height, "sha256": hashlib.sha256(data).hexdigest()})
        tokens += math.ceil(width / PATCH) * math.ceil(height / PATCH)
    return words, tokens


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    kept: list[list[dict[str, object]]] = []

    async def chat(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        seen: list[dict[str, object]] = []
        try:
            messages = body.get("messages")
            if not isinstance(messages, list) or not messages:
                raise Refused("messages: a non-empty list")
            words = images = 0
            for k, message in enumerate(messages):
                if not isinstance(message, dict) or message.get("role") not in ("system", "user", "assistant"):
                    raise Refused(f"messages[{k}]: {{role: system|user|assistant, content}}")
                w, i = _content(message.get("content"), f"messages[{k}]", seen)
                words, images = words + w, images + i
        except Refused as exc:
            return web.json_response({"error": {"message": str(exc), "type": "invalid_request_error"}}, status=400)
        kept.append(seen)
        n = int(body.get("max_tokens", 16))
        prompt = words + 1 + images
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for i in range(n):
            chunk = {"choices": [{"index": 0, "delta": {"content": f" w{i}"}, "finish_reason": None}]}
            await response.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
            await asyncio.sleep(0)
        usage = {"prompt_tokens": prompt, "completion_tokens": n, "total_tokens": prompt + n}
        await response.write(b"data: " + json.dumps({"choices": [], "usage": usage}).encode() + b"\n\ndata: [DONE]\n\n")
        await response.write_eof()
        return response

    async def models(request: web.Request) -> web.Response:
        return web.json_response({"data": [{"id": "vision"}]})

    async def seen(request: web.Request) -> web.Response:
        return web.json_response(kept)

    app = web.Application(client_max_size=64 * 2**20)
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/seen", seen)
    web.run_app(app, host="127.0.0.1", port=args.port, print=None, access_log=None)


if __name__ == "__main__":
    main()
