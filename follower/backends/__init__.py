"""Serving backends behind one small Protocol, registered in one dict."""

from __future__ import annotations

from follower.backends.base import Backend
from follower.backends.onnxruntime import OnnxRuntimeBackend

# Triton, TorchScript and TF Serving slot in here as one module and one entry each.
BACKENDS: dict[str, type[Backend]] = {
    "onnxruntime": OnnxRuntimeBackend,
}


def get_backend(name: str, **options: object) -> Backend:
    """A new, unstarted backend by name; an unknown name is a ValueError listing the known ones."""
    try:
        cls = BACKENDS[name]
    except KeyError:
        raise ValueError(f"unknown backend {name!r}; known backends: {', '.join(sorted(BACKENDS))}") from None
    return cls(**options)


__all__ = ["BACKENDS", "Backend", "OnnxRuntimeBackend", "get_backend"]
