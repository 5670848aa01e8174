"""`server.precision`: onnxruntime's server converts the model as it loads (its argv says which precision), and
llama.cpp's quantised `server.llm.dtype`s: a job asking another backend for either is refused, and a sweep over
either makes one configuration per value."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from common.errors import InvalidSpec
from common.spec.parse import parse_spec_yaml
from common.spec.server import ServerOptions
from common.spec.sweep import configurations
from follower.attempt.request_data import MAX_CALIBRATION, write_calibration
from follower.backends.onnxruntime import CALIBRATION_FILE, OnnxRuntimeBackend
from tests.unit.follower.test_gpu_argv import TENSOR

BASE = "name: j\nmodel: m:1\nload: {rate: 10, duration: 1s, allow_short: true}\n"


@pytest.mark.parametrize("precision", ["int8_dynamic", "float16"])
def test_the_server_is_told_the_precision(precision: str, tmp_path: Path) -> None:
    argv = OnnxRuntimeBackend(server=ServerOptions(precision=precision)).argv(tmp_path / "m.onnx", TENSOR)  # type: ignore[arg-type]
    assert argv[argv.index("--precision") + 1] == precision


def test_float32_is_the_model_as_stored(tmp_path: Path) -> None:
    assert "--precision" not in OnnxRuntimeBackend(server=ServerOptions()).argv(tmp_path / "m.onnx", TENSOR)


PRECISION = "server.precision converts the model for onnxruntime"
GGUF_TYPES = "server.llm.dtype q8_0 and q4_0 are llama.cpp's GGUF types; vllm cannot"


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        ("backends: [onnxruntime, triton]\nserver: {precision: int8_dynamic}\n", PRECISION),
        ("backends: [torchscript]\nsweep: {precision: [float32, float16]}\n", PRECISION),
        ("backends: [vllm]\nserver: {llm: {dtype: q4_0}}\n", GGUF_TYPES),
        ("backends: [llamacpp, vllm]\nsweep: {llm.dtype: [float16, q8_0]}\n", GGUF_TYPES),
    ],
)
def test_a_conversion_asked_of_a_server_that_does_not_make_it_is_refused(extra: str, needle: str) -> None:
    with pytest.raises(InvalidSpec) as caught:
        parse_spec_yaml(BASE + extra)
    assert needle in str(caught.value)


def test_a_sweep_over_precision_is_one_configuration_each() -> None:
    spec = parse_spec_yaml(BASE + "sweep: {precision: [float32, int8_dynamic, float16]}\n")
    assert spec.sweep == {"precision": ["float32", "int8_dynamic", "float16"]}
    with pytest.raises(InvalidSpec) as caught:
        parse_spec_yaml(BASE + "sweep: {precision: [float32, int4]}\n")
    assert "precision" in str(caught.value)


def test_a_sweep_over_llamacpps_types_is_one_configuration_each() -> None:
    spec = parse_spec_yaml(BASE + "backends: [llamacpp]\nsweep: {llm.dtype: [float32, float16, q8_0, q4_0]}\n")
    assert [s.llm.dtype for s in configurations(spec.sweep or {}, spec.server)] == ["float32", "float16", "q8_0", "q4_0"]


def test_static_int8_calibrates_on_the_jobs_own_request_data(tmp_path: Path) -> None:
    """Refused without uploaded data; the server is handed the calibration file the attempt writes (the data's first
    samples as the model's inputs, in its datatype), and cannot start without one."""
    with pytest.raises(InvalidSpec) as caught:
        parse_spec_yaml(BASE + "sweep: {precision: [float32, int8_static]}\n")
    assert "int8_static calibrates on the job's request data: give data: {source: upload" in str(caught.value)
    assert parse_spec_yaml(BASE + "data: {source: upload, id: abc}\nserver: {precision: int8_static}\n")
    backend = OnnxRuntimeBackend(server=ServerOptions(precision="int8_static"))
    with pytest.raises(RuntimeError, match="int8_static has no calibration samples"):
        backend.argv(tmp_path / "m.onnx", TENSOR, calibration=tmp_path / "absent.npz")
    rows = [np.arange(4, dtype=np.float64) + i for i in range(300)]
    written = write_calibration({"x": rows}, TENSOR, tmp_path / CALIBRATION_FILE)
    argv = backend.argv(tmp_path / "m.onnx", TENSOR, calibration=written)
    assert argv[argv.index("--calibration") + 1] == str(written)
    with np.load(written) as data:
        assert data["x"].dtype == np.float32 and data["x"].shape == (MAX_CALIBRATION, 4)
        assert data["x"][7].tolist() == [7.0, 8.0, 9.0, 10.0]
    for samples, needle in [
        (None, "the job has none"),
        ({"y": rows}, "the data has no 'x', a model input"),
        ({"x": [np.zeros(4), np.zeros(3)]}, "'x' is not FP32 arrays of one shape"),
    ]:
        with pytest.raises(ValueError, match=needle):
            write_calibration(samples, TENSOR, tmp_path / "c.npz")
