"""KServe v2 datatypes and how each framework spells them: one table per mapping, used by leader and follower."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from common.wire.models import Datatype

# KServe v2 datatype → numpy dtype (BYTES has none: an object array of bytes).
V2_TO_NUMPY: dict[str, np.dtype[Any]] = {
    "BOOL": np.dtype(np.bool_),
    "UINT8": np.dtype(np.uint8),
    "UINT16": np.dtype(np.uint16),
    "UINT32": np.dtype(np.uint32),
    "UINT64": np.dtype(np.uint64),
    "INT8": np.dtype(np.int8),
    "INT16": np.dtype(np.int16),
    "INT32": np.dtype(np.int32),
    "INT64": np.dtype(np.int64),
    "FP16": np.dtype(np.float16),
    "FP32": np.dtype(np.float32),
    "FP64": np.dtype(np.float64),
}
INT_DATATYPES = frozenset(k for k, v in V2_TO_NUMPY.items() if v.kind in "iu")
FLOAT_DATATYPES = frozenset(k for k, v in V2_TO_NUMPY.items() if v.kind == "f")

# ONNX TensorProto element types (the numbers of onnx.TensorProto.DataType, fixed by the ONNX spec) → KServe v2.
# Anything else (complex, bfloat16, float8, ...) has no KServe v2 datatype and is refused, not guessed.
ONNX_TO_V2: dict[int, Datatype] = {
    1: "FP32",  # FLOAT
    2: "UINT8",
    3: "INT8",
    4: "UINT16",
    5: "INT16",
    6: "INT32",
    7: "INT64",
    8: "BYTES",  # STRING
    9: "BOOL",
    10: "FP16",  # FLOAT16
    11: "FP64",  # DOUBLE
    12: "UINT32",
    13: "UINT64",
}

# ONNX Runtime's type strings → KServe v2.
ORT_TO_V2: dict[str, Datatype] = {
    "tensor(bool)": "BOOL",
    "tensor(uint8)": "UINT8",
    "tensor(uint16)": "UINT16",
    "tensor(uint32)": "UINT32",
    "tensor(uint64)": "UINT64",
    "tensor(int8)": "INT8",
    "tensor(int16)": "INT16",
    "tensor(int32)": "INT32",
    "tensor(int64)": "INT64",
    "tensor(float16)": "FP16",
    "tensor(float)": "FP32",
    "tensor(double)": "FP64",
    "tensor(string)": "BYTES",
}

# KServe v2 → Triton's config.pbtxt data types.
V2_TO_TRITON: dict[str, str] = {
    "BOOL": "TYPE_BOOL",
    "UINT8": "TYPE_UINT8",
    "UINT16": "TYPE_UINT16",
    "UINT32": "TYPE_UINT32",
    "UINT64": "TYPE_UINT64",
    "INT8": "TYPE_INT8",
    "INT16": "TYPE_INT16",
    "INT32": "TYPE_INT32",
    "INT64": "TYPE_INT64",
    "FP16": "TYPE_FP16",
    "FP32": "TYPE_FP32",
    "FP64": "TYPE_FP64",
    "BYTES": "TYPE_STRING",
}

# TensorFlow's DataType names (tensorflow/core/framework/types.proto) → KServe v2, as TF Serving's signatures give them
# (bfloat16, complex, quantized types: no datatype here, refused rather than guessed).
TF_TO_V2: dict[str, Datatype] = {
    "DT_FLOAT": "FP32",
    "DT_DOUBLE": "FP64",
    "DT_HALF": "FP16",
    "DT_INT8": "INT8",
    "DT_INT16": "INT16",
    "DT_INT32": "INT32",
    "DT_INT64": "INT64",
    "DT_UINT8": "UINT8",
    "DT_UINT16": "UINT16",
    "DT_UINT32": "UINT32",
    "DT_UINT64": "UINT64",
    "DT_BOOL": "BOOL",
    "DT_STRING": "BYTES",
}
V2_TO_TF: dict[str, str] = {v: k for k, v in TF_TO_V2.items()}


def raw_contents(datatype: str, values: Sequence[object] | np.ndarray) -> bytes:
    """A tensor's raw contents as KServe v2 gRPC carries them: little-endian values; BYTES as a 4-byte little-endian
    length before each element."""
    if datatype == "BYTES":
        flat = values.ravel() if isinstance(values, np.ndarray) else values
        parts = [v if isinstance(v, bytes) else str(v).encode() for v in flat]
        return b"".join(len(v).to_bytes(4, "little") + v for v in parts)
    dtype = V2_TO_NUMPY.get(datatype)
    if dtype is None:
        raise ValueError(f"unsupported datatype {datatype}")
    return np.ascontiguousarray(np.asarray(values, dtype=dtype.newbyteorder("<"))).tobytes()


def from_raw_contents(datatype: str, raw: bytes, shape: Sequence[int]) -> np.ndarray:
    """A tensor from its raw contents as KServe v2 gRPC (and TF Serving's tensor_content) carry them: little-endian
    values, row major; BYTES as length-prefixed elements (an object array of bytes)."""
    if datatype == "BYTES":
        items, at = [], 0
        while at < len(raw):
            size = int.from_bytes(raw[at : at + 4], "little")
            items.append(raw[at + 4 : at + 4 + size])
            at += 4 + size
        return np.asarray(items, dtype=object).reshape(list(shape))
    dtype = V2_TO_NUMPY.get(datatype)
    if dtype is None:
        raise ValueError(f"unsupported datatype {datatype}")
    return np.frombuffer(raw, dtype=dtype.newbyteorder("<")).reshape(list(shape))
