"""Images in a vision model's requests (`llm.images`): PNG files of random pixels written here (zlib and the PNG
format's three chunks, no imaging library), each request's its own, and the content parts each API puts them in:
OpenAI chat's `image_url`, the Responses API's `input_image`, Anthropic's base64 `image` block."""

from __future__ import annotations

import base64
import struct
import zlib
from typing import Any

import numpy as np

from common.spec.llm import ImageInputs


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def png(width: int, height: int, rng: np.random.Generator) -> bytes:
    """A PNG of `width` x `height` random RGB pixels (8 bits a channel)."""
    pixels = rng.integers(0, 256, size=(height, width * 3), dtype=np.uint8)
    rows = b"".join(b"\x00" + row.tobytes() for row in pixels)  # filter type 0 (none) before each row
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)  # 8-bit RGB, no interlace
    return b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", header) + _chunk(b"IDAT", zlib.compress(rows, 1)) + _chunk(b"IEND", b"")


def images_of(spec: ImageInputs, rng: np.random.Generator) -> list[bytes]:
    """One request's images."""
    return [png(spec.width, spec.height, rng) for _ in range(spec.count)]


def with_images(api: str, text: str, images: list[bytes]) -> list[dict[str, Any]]:
    """A user message's content: its text and its images, as `api` writes them."""
    encoded = [base64.b64encode(image).decode("ascii") for image in images]
    if api == "messages":
        parts: list[dict[str, Any]] = [
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": data}} for data in encoded
        ]
        return [*parts, {"type": "text", "text": text}]
    if api == "responses":
        return [{"type": "input_text", "text": text}] + [
            {"type": "input_image", "image_url": f"data:image/png;base64,{data}"} for data in encoded
        ]
    return [{"type": "text", "text": text}] + [
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{data}"}} for data in encoded
    ]
