"""The size of one request's tensors: how a declared shape resolves at a batch size, and the bound every declared shape
and every request is held to (models at upload, jobs at submission, endpoints' metadata on the follower)."""

from __future__ import annotations

from collections.abc import Sequence

# The most values one request may carry, all inputs together at its batch size: 8 Mi (32 MiB of FP32). A follower
# builds its request bodies before the run; a model (or an endpoint's metadata) declaring an input of [-1, 30000000]
# once made it build sixteen bodies of 30 M values and die, on every attempt. Declared at upload or submission past it:
# refused, naming the tensor; an endpoint's metadata past it: its job fails, naming it, before any body is built.
MAX_REQUEST_ELEMENTS = 8 * 2**20
MAX_RANK = 16


def shape_elements(shape: Sequence[int], batch_size: int = 1) -> int:
    """Values in one request at `batch_size`: a dynamic first dimension is the batch, any other dynamic one 1 (as the
    follower's bodies resolve them)."""
    n = 1
    for i, d in enumerate(shape):
        n *= (batch_size if i == 0 else 1) if d < 0 else d
    return n


def check_shape(name: str, shape: Sequence[int]) -> None:
    """ValueError naming the tensor if one sample of it is past the bound (or its shape is not a shape)."""
    if len(shape) > MAX_RANK or any(d < -1 for d in shape):
        dims = list(shape)[: MAX_RANK + 1]
        raise ValueError(f"tensor {name[:64]!r}: shape {dims} is not a shape (at most {MAX_RANK} dimensions, each -1 or a size)")
    if (n := shape_elements(shape)) > MAX_REQUEST_ELEMENTS:
        raise ValueError(
            f"tensor {name[:64]!r} of shape {list(shape)} holds {n:,} values per sample; a request may hold at most "
            f"{MAX_REQUEST_ELEMENTS:,}"
        )
