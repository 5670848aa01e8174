"""ONNX signature extraction on models built with onnx.helper."""

from __future__ import annotations

import io
import os

import pytest
from onnx import TensorProto

from common.errors import InvalidSpec
from common.formats.onnx_signature import check_layout, read_signature
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


class _Counting(io.BytesIO):
    """A file that counts the bytes read from it (seeks cost nothing)."""

    read_bytes = 0

    def read(self, size: int | None = -1, /) -> bytes:
        out = super().read(size)
        self.read_bytes += len(out)
        return out


def test_junk_is_refused_from_its_layout_without_being_read_whole() -> None:
    """Four concurrent 400 MiB junk uploads once took the leader from 430 MB to 1,969 MB: each was read whole for the
    ONNX parser before it failed. The top level is walked from the file instead, skipping over lengths: a models' few
    fields pass; junk is refused at its first byte, and a field that claims most of the file is skipped, not read."""
    for model in (identity_model(), linear_model()):
        check_layout(io.BytesIO(model))
    for junk, said in [
        # Random junk after a first byte whose wire type (its low 3 bits, 7) no field has: wholly random junk starts
        # with one of a model's field tags about one time in thirty, and is then refused further on (a full run saw it).
        (b"\xff" + os.urandom(4095), "byte 0 does not start a field of a model"),
        (bytes(64), "byte 0 does not start a field of a model"),
        (b"\x08\x01", "it has no graph"),
        (b"\x3a\xff\xff\xff\x0f", "the field at byte 0 runs past the file's end"),
    ]:
        with pytest.raises(InvalidSpec, match=said) as caught:
            check_layout(io.BytesIO(junk))
        assert caught.value.field == "file"
    size = 64 * 1024 * 1024
    length = size - 16
    field = b"\x3a" + bytes([(length >> s & 0x7F) | (0x80 if length >> (s + 7) else 0) for s in range(0, 28, 7)])
    big = _Counting(field + bytes(length) + b"\xff" * (size - len(field) - length))  # a "graph", then junk
    with pytest.raises(InvalidSpec, match=f"byte {len(field) + length:,} does not start a field"):
        check_layout(big)
    assert big.read_bytes < 64, big.read_bytes  # the 64 MiB field was skipped over, never read
