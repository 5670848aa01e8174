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


class CanonicalParams(BaseModel):
    """The hyper-parameters and per-inference cost a canonical bundle's meta.json records (for grouping and roofline)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Annotated[str, Field(pattern=r"^[a-z][a-z0-9_]{0,31}$")]
    depth: Annotated[int, Field(ge=1, le=4096)]
    width: Annotated[int, Field(ge=1, le=1_000_000)]
    input_size: Annotated[int, Field(ge=1, le=1_000_000)]
    flops: Annotated[int, Field(ge=0)] | None = None  # per inference at batch 1 (multiply-add = 2)
    bytes: Annotated[int, Field(ge=0)] | None = None  # moved per inference at batch 1 (weights + activations)


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
    # Parsed from a canonical bundle's meta.json at upload (never executed); None for every other model.
    canonical: CanonicalParams | None = None

    @property
    def ref(self) -> str:
        return f"{self.name}:{self.version}"
