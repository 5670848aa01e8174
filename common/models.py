"""Model-repository metadata: what the leader stores beside each model file in GridFS."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from common.spec import NAME_PATTERN, VERSION_PATTERN

# KServe v2 / Open Inference Protocol datatype names.
Datatype = Literal[
    "BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64", "FP16", "FP32", "FP64", "BYTES"
]
# "bundle": a zip the canonical generator writes (model.onnx + model.pt + meta.json); the leader reads only the ONNX.
ModelFormat = Literal["onnx", "torchscript", "savedmodel", "bundle"]


class TensorSpec(BaseModel):
    """One input or output of a model; -1 in the shape marks a dynamic dimension (the batch)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    datatype: Datatype
    shape: list[int]


class ModelMeta(BaseModel):
    """A stored model: identity, format, signature and integrity."""

    model_config = ConfigDict(extra="forbid")

    name: Annotated[str, Field(pattern=NAME_PATTERN)]
    version: Annotated[str, Field(pattern=VERSION_PATTERN)]
    format: ModelFormat
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]
    sha256: str
    size_bytes: int
    created_at: datetime
    owner: str = "admin"  # the uploading token's user; only they (or an admin) may delete it

    @property
    def ref(self) -> str:
        return f"{self.name}:{self.version}"
