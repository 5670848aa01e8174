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
    assert set(BACKENDS) == {"onnxruntime", "torchscript", "triton", "tfserving", "vllm", "sglang", "triton-openai", "llamacpp"}


@pytest.mark.parametrize("name", ["onnxruntime", "torchscript", "triton", "tfserving", "vllm", "sglang", "triton-openai"])
def test_every_backend_satisfies_the_protocol(name: str) -> None:
    backend = get_backend(name)
    members = [m for m in dir(Backend) if not m.startswith("_")] + ["name"]
    assert all(hasattr(type(backend), m) for m in members), members
    assert backend.name == name


def test_available_backends_names_what_is_missing(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from follower.backends import available_backends

    # A host without Triton (an empty install home, nothing on PATH) and without TF Serving.
    monkeypatch.setenv("BENCHFLEET_TRITON_HOME", str(tmp_path / "no-triton"))
    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # neither tritonserver nor tensorflow_model_server lives there
    usable, missing = available_backends()
    assert "onnxruntime" in usable
    assert "triton" not in usable and "tritonserver" in missing["triton"]
    assert "tfserving" not in usable and "tensorflow_model_server" in missing["tfserving"]
    assert usable == sorted(usable)
    assert set(usable) | set(missing) == set(BACKENDS)


def test_available_backends_keeps_an_operator_list_and_drops_unknown_names() -> None:
    from follower.backends import available_backends

    usable, missing = available_backends(["onnxruntime", "nosuch"])
    assert usable == ["onnxruntime"]
    assert "known backends" in missing["nosuch"]


def test_follower_registers_only_available_backends(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from follower.agent.main import follower_info
    from follower.settings import FollowerSettings

    monkeypatch.setenv("BENCHFLEET_TRITON_HOME", str(tmp_path / "no-triton"))
    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # neither tritonserver nor tensorflow_model_server lives there
    settings = FollowerSettings(token="x" * 16, follower_id="f1", work_dir=tmp_path)
    info = follower_info(settings, "incarnation-1")
    assert "triton" not in info.backends and "tfserving" not in info.backends
    assert "onnxruntime" in info.backends
