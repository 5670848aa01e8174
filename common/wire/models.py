"""Model-repository metadata: what the leader stores beside each model file in GridFS."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from common.base import NAME_PATTERN, VERSION_PATTERN
from common.wire.auth import DEFAULT_TEAM

# KServe v2 / Open Inference Protocol datatype names.
Datatype = Literal[
    "BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64", "FP16", "FP32", "FP64", "BYTES"
]
# "bundle": a zip the canonical generator writes (model.onnx + model.pt + meta.json); the leader reads only the ONNX.
# "hf": a zip of a Hugging Face model directory (config, safetensors weights, tokenizer): an LLM (common/formats/hfbundle.py).
# "endpoint": a model at an endpoint benchfleet does not run (a job's target): its signature, no files.
ModelFormat = Literal["onnx", "torchscript", "savedmodel", "bundle", "hf", "endpoint"]


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


class LlmParams(BaseModel):
    """A language model's description, read from its config.json and weight headers at upload (never executed)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    architecture: str  # the config's first architecture, e.g. LlamaForCausalLM
    model_type: str
    parameters: Annotated[int, Field(ge=0)]  # counted from the safetensors headers
    context_length: Annotated[int, Field(ge=1)]  # max_position_embeddings
    vocab_size: Annotated[int, Field(ge=1)]
    layers: int | None = None
    hidden: int | None = None
    dtype: str | None = None  # the config's torch_dtype
    chat_template: bool = False  # its tokenizer_config.json holds a chat template (api: chat needs one)


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
    team: str = DEFAULT_TEAM  # the uploader's team: only it (and admins) sees the model
    # Parsed from a canonical bundle's meta.json at upload (never executed); None for every other model.
    canonical: CanonicalParams | None = None
    llm: LlmParams | None = None  # an "hf" model: what its config and weights say it is
    # Set by an admin: a follower that cannot sandbox model servers still runs this model's own code (TorchScript,
    # SavedModel); elsewhere every model server is sandboxed whatever this says (follower/host/sandbox.py).
    trusted: bool = False

    @property
    def is_llm(self) -> bool:
        """A language model, served over an OpenAI-compatible API rather than KServe v2."""
        return self.format == "hf"

    @property
    def ref(self) -> str:
        return f"{self.name}:{self.version}"
