"""Named pre- and post-processors (image decode/resize/normalise, a tokenizer, top-k with labels), and sample images.

A job names them in `data.preprocess` / `data.postprocess`; they run on the follower, client-side (before the load
generator encodes the bodies) or server-side, never on the leader. Sample images come from scikit-image's data
module, which ships them: nothing is downloaded.
"""

from __future__ import annotations

import hashlib
import io
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

# ImageNet statistics, the normalisation nearly every vision model expects.
IMAGENET_MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32)
IMAGENET_STD = np.array([0.229, 0.224, 0.225], dtype=np.float32)
SAMPLE_IMAGES = ("astronaut", "coffee", "chelsea", "rocket", "immunohistochemistry")


def decode_image(data: bytes) -> np.ndarray:
    """Encoded image bytes (PNG, JPEG, ...) to an HxWx3 uint8 array."""
    from PIL import Image

    with Image.open(io.BytesIO(data)) as img:
        return np.asarray(img.convert("RGB"))


def image_to_tensor(image: np.ndarray | bytes, size: int = 224) -> np.ndarray:
    """Decode if needed, resize to size×size, scale to [0, 1], normalise with ImageNet statistics; 3×size×size FP32."""
    from PIL import Image

    array = decode_image(image) if isinstance(image, bytes | bytearray) else np.asarray(image)
    if array.ndim == 2:
        array = np.stack([array] * 3, axis=-1)
    resized = np.asarray(Image.fromarray(array[..., :3].astype(np.uint8)).resize((size, size), Image.Resampling.BILINEAR))
    scaled = resized.astype(np.float32) / 255.0
    return ((scaled - IMAGENET_MEAN) / IMAGENET_STD).transpose(2, 0, 1).astype(np.float32)


def tokenize(text: str, length: int = 32, vocab: int = 30_000) -> np.ndarray:
    """Lower-cased whitespace tokens hashed into `vocab` ids (0 = padding), padded or cut to `length`; INT64."""
    ids = [
        1 + int.from_bytes(hashlib.blake2b(w.encode(), digest_size=4).digest(), "little") % (vocab - 1)
        for w in text.lower().split()
    ]
    ids = (ids + [0] * length)[:length]
    return np.asarray(ids, dtype=np.int64)


def top_k(logits: np.ndarray, k: int = 5, labels: Sequence[str] | None = None) -> list[list[dict[str, Any]]]:
    """Per row, the k best classes as {"index", "score" (softmax), "label"} best first."""
    logits = np.atleast_2d(np.asarray(logits, dtype=np.float64))
    shifted = np.exp(logits - logits.max(axis=1, keepdims=True))
    probs = shifted / shifted.sum(axis=1, keepdims=True)
    out = []
    for row in probs:
        best = np.argsort(-row)[:k]
        out.append(
            [
                {"index": int(i), "score": float(row[i]), "label": labels[i] if labels and i < len(labels) else str(i)}
                for i in best
            ]
        )
    return out


# The implementations of the processors a job may name: exactly the names of common/spec/processors.py.
PREPROCESSORS: dict[str, Callable[..., np.ndarray]] = {"image_imagenet": image_to_tensor, "tokenize": tokenize}
POSTPROCESSORS: dict[str, Callable[..., Any]] = {"topk": top_k}


def get_processor(name: str, kind: str = "pre") -> Callable[..., Any]:
    """A registered processor; an unknown name is a ValueError listing the known ones."""
    registry: dict[str, Callable[..., Any]] = dict(PREPROCESSORS if kind == "pre" else POSTPROCESSORS)
    try:
        return registry[name]
    except KeyError:
        raise ValueError(f"unknown {kind}processor {name!r}; known: {', '.join(sorted(registry))}") from None


def sample_images(n: int, size: int = 224) -> np.ndarray:
    """n preprocessed images (cycling scikit-image's shipped samples) as an n×3×size×size FP32 batch."""
    try:
        from skimage import data
    except ImportError as exc:
        raise RuntimeError("sample images need scikit-image (pip install 'benchfleet[images]')") from exc
    images = [image_to_tensor(getattr(data, name)(), size) for name in SAMPLE_IMAGES]
    return np.stack([images[i % len(images)] for i in range(n)])


# -- server-side processing ------------------------------------------------------------------------------------------
# With `processing: server` the client sends raw data in a BYTES tensor of shape [N, 1] under the model input's name
# and the server runs the named processor before inference (and the postprocessor after it). JSON has no raw bytes,
# so encoded images travel as base64 text on every transport (one convention for HTTP and gRPC, as MLServer's
# "base64" codec); text travels as UTF-8 strings.
RAW_INPUT_SHAPE = [-1, 1]
# Preprocessors whose raw input is binary (base64 on the wire) rather than text.
BINARY_PREPROCESSORS = frozenset({"image_imagenet"})


def _element_text(value: object) -> str:
    return value.decode("utf-8") if isinstance(value, bytes | bytearray) else str(value)


def server_preprocess(name: str, raw: np.ndarray, model_shape: Sequence[int]) -> np.ndarray:
    """A BYTES batch ([N] or [N, 1] of base64/text elements) through preprocessor `name` into the model's input batch.

    `model_shape` is the model input's own shape: an image side or a token length is read from it (dynamic: the
    processor's default). A malformed element is a ValueError naming its row.
    """
    import base64
    import binascii

    process = get_processor(name, "pre")
    rows = [np.asarray(r).ravel() for r in np.asarray(raw, dtype=object).reshape(len(raw), -1)]
    out = []
    for i, row in enumerate(rows):
        if len(row) != 1:
            raise ValueError(f"row {i}: a raw input carries one element per row, got {len(row)}")
        text = _element_text(row[0])
        if name in BINARY_PREPROCESSORS:
            try:
                data = base64.b64decode(text, validate=True)
            except (binascii.Error, ValueError):
                raise ValueError(f"row {i}: not base64 (encoded images travel base64 in BYTES tensors)") from None
            side = model_shape[2] if len(model_shape) == 4 and model_shape[2] > 0 else 224
            try:
                out.append(process(data, side))
            except Exception as exc:  # noqa: BLE001 - PIL raises several types for undecodable bytes
                raise ValueError(f"row {i}: not a decodable image: {exc}") from None
        elif name == "tokenize":
            length = model_shape[1] if len(model_shape) == 2 and model_shape[1] > 0 else 32
            out.append(process(text, length))
        else:
            out.append(process(text))
    return np.stack(out)


def server_postprocess(name: str, output: np.ndarray) -> np.ndarray:
    """The model's output batch through postprocessor `name`: a [N, 1] object array of one JSON document per row."""
    import json

    process = get_processor(name, "post")
    rows = process(output)
    return np.asarray([json.dumps(r) for r in rows], dtype=object).reshape(len(rows), 1)


def encode_png(image: np.ndarray) -> bytes:
    """An HxWx3 (or HxW) uint8 image as PNG bytes: the raw form of a shipped sample for server-side processing."""
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(np.asarray(image).astype(np.uint8)).save(buffer, format="PNG")
    return buffer.getvalue()


def raw_sample_images() -> list[bytes]:
    """scikit-image's shipped samples as PNG bytes (what a client would send for server-side preprocessing)."""
    try:
        from skimage import data
    except ImportError as exc:
        raise RuntimeError("sample images need scikit-image (pip install 'benchfleet[images]')") from exc
    return [encode_png(getattr(data, name)()) for name in SAMPLE_IMAGES]
