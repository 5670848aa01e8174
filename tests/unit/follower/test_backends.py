"""The backend registry: one dict, unknown names listed in the error."""

from __future__ import annotations

import pytest

from follower.backends import BACKENDS, Backend, get_backend


def test_known_backend_satisfies_the_protocol() -> None:
    backend = get_backend("onnxruntime")
    members = [m for m in dir(Backend) if not m.startswith("_")] + ["name"]
    assert all(hasattr(type(backend), m) for m in members), members
    assert backend.name == "onnxruntime"
    assert backend.version()


def test_unknown_backend_lists_known_names() -> None:
    with pytest.raises(ValueError, match="onnxruntime") as info:
        get_backend("tensorrt-llm")
    assert "tensorrt-llm" in str(info.value)
    assert set(BACKENDS) == {"onnxruntime", "torchscript", "triton", "tfserving"}


@pytest.mark.parametrize("name", ["onnxruntime", "torchscript", "triton", "tfserving"])
def test_every_backend_satisfies_the_protocol(name: str) -> None:
    backend = get_backend(name)
    members = [m for m in dir(Backend) if not m.startswith("_")] + ["name"]
    assert all(hasattr(type(backend), m) for m in members), members
    assert backend.name == name
