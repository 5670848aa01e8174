"""ONNX signature extraction on models built with onnx.helper."""

from __future__ import annotations

import pytest
from onnx import TensorProto

from common.errors import InvalidSpec
from common.formats.onnx_signature import read_signature
from common.wire.models import TensorSpec
from tests.unit.leader.onnx_models import identity_model, linear_model


def test_dynamic_batch_becomes_minus_one() -> None:
    inputs, outputs = read_signature(identity_model())
    assert inputs == [TensorSpec(name="x", datatype="FP32", shape=[-1, 4])]
    assert outputs == [TensorSpec(name="y", datatype="FP32", shape=[-1, 4])]


@pytest.mark.parametrize(
    ("elem_type", "datatype"),
    [(TensorProto.INT64, "INT64"), (TensorProto.FLOAT16, "FP16"), (TensorProto.DOUBLE, "FP64"), (TensorProto.UINT8, "UINT8"),
     (TensorProto.UINT32, "UINT32"), (TensorProto.UINT64, "UINT64"), (TensorProto.BOOL, "BOOL"), (TensorProto.INT8, "INT8")],
)
def test_element_types_map_to_kserve(elem_type: int, datatype: str) -> None:
    inputs, _ = read_signature(identity_model(elem_type=elem_type, dims=(2, 3)))
    assert inputs[0].datatype == datatype
    assert inputs[0].shape == [2, 3]


def test_initializers_are_not_inputs() -> None:
    inputs, outputs = read_signature(linear_model())
    assert [t.name for t in inputs] == ["input"]
    assert inputs[0].shape == [-1, 3]
    assert outputs == [TensorSpec(name="logits", datatype="FP32", shape=[-1, 2])]


def test_unsupported_element_type_is_refused() -> None:
    with pytest.raises(InvalidSpec) as info:
        read_signature(identity_model(elem_type=TensorProto.BFLOAT16))
    assert info.value.field == "file"
    assert "BFLOAT16" in info.value.message


@pytest.mark.parametrize("data", [b"", b"this is not a model", b"\x08\x07", bytes(range(256)) * 4])
def test_garbage_is_invalid_file(data: bytes) -> None:
    with pytest.raises(InvalidSpec) as info:
        read_signature(data)
    assert info.value.field == "file"
    assert info.value.status == 422
