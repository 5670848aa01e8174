"""Serving backends behind one small Protocol, registered in one dict."""

from __future__ import annotations

from follower.backends.base import Backend
from follower.backends.llamacpp import LlamaCppBackend
from follower.backends.onnxruntime import OnnxRuntimeBackend
from follower.backends.sglang import SglangBackend
from follower.backends.tfserving import TFServingBackend
from follower.backends.torchscript import TorchScriptBackend
from follower.backends.triton import TritonBackend
from follower.backends.triton_openai import TritonOpenAiBackend
from follower.backends.vllm import VllmBackend

BACKENDS: dict[str, type[Backend]] = {
    "onnxruntime": OnnxRuntimeBackend,
    "torchscript": TorchScriptBackend,
    "triton": TritonBackend,
    "tfserving": TFServingBackend,
    "vllm": VllmBackend,
    "sglang": SglangBackend,
    "triton-openai": TritonOpenAiBackend,
    "llamacpp": LlamaCppBackend,
}


def get_backend(name: str, **options: object) -> Backend:
    """A new, unstarted backend by name; an unknown name is a ValueError listing the known ones."""
    try:
        cls = BACKENDS[name]
    except KeyError:
        raise ValueError(f"unknown backend {name!r}; known backends: {', '.join(sorted(BACKENDS))}") from None
    return cls(**options)


def available_backends(names: list[str] | None = None) -> tuple[list[str], dict[str, str]]:
    """The backends (of `names`, default all) this host can run, sorted, and the reason for each one it cannot."""
    usable: list[str] = []
    missing: dict[str, str] = {}
    for name in sorted(names if names is not None else BACKENDS):
        cls = BACKENDS.get(name)
        if cls is None:
            missing[name] = f"unknown backend; known backends: {', '.join(sorted(BACKENDS))}"
            continue
        ok, why = cls.available()
        if ok:
            usable.append(name)
        else:
            missing[name] = why
    return usable, missing


__all__ = [
    "BACKENDS",
    "Backend",
    "LlamaCppBackend",
    "OnnxRuntimeBackend",
    "SglangBackend",
    "TFServingBackend",
    "TorchScriptBackend",
    "TritonBackend",
    "TritonOpenAiBackend",
    "VllmBackend",
    "available_backends",
    "get_backend",
]
