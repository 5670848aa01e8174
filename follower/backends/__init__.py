"""Serving backends behind one small Protocol, registered in one dict."""

from __future__ import annotations

from follower.backends.base import Backend
from follower.backends.onnxruntime import OnnxRuntimeBackend
from follower.backends.tfserving import TFServingBackend
from follower.backends.torchscript import TorchScriptBackend
from follower.backends.triton import TritonBackend

BACKENDS: dict[str, type[Backend]] = {
    "onnxruntime": OnnxRuntimeBackend,
    "torchscript": TorchScriptBackend,
    "triton": TritonBackend,
    "tfserving": TFServingBackend,
}


def get_backend(name: str, **options: object) -> Backend:
    """A new, unstarted backend by name; an unknown name is a ValueError listing the known ones."""
    try:
        cls = BACKENDS[name]
    except KeyError:
        raise ValueError(f"unknown backend {name!r}; known backends: {', '.join(sorted(BACKENDS))}") from None
    return cls(**options)


__all__ = ["BACKENDS", "Backend", "OnnxRuntimeBackend", "TFServingBackend", "TorchScriptBackend", "TritonBackend", "get_backend"]
