"""Model-repository metadata: what the leader stores beside each model file in GridFS."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, model_validator

from common.base import NAME_PATTERN, VERSION_PATTERN
from common.tensors import check_shape, shape_elements
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

    name: Annotated[str, Field(max_length=256)]
    datatype: Datatype
    shape: list[int]

    def elements(self, batch_size: int = 1) -> int:
        """Values of this tensor in one request of `batch_size` (common/tensors.py)."""
        return shape_elements(self.shape, batch_size)

    @model_validator(mode="after")
    def _bounded(self) -> TensorSpec:
        check_shape(self.name, self.shape)
        return self


def request_elements(inputs: Sequence[TensorSpec], batch_size: int) -> int:
    """Values in one request of `batch_size` across every input."""
    return sum(t.elements(batch_size) for t in inputs)


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

    @property
    def scores(self) -> bool:
        """Whether it is a sequence classifier (a reranker's cross-encoder): it scores texts, generating nothing."""
        return self.architecture.endswith("ForSequenceClassification")


TAG_PATTERN = r"^[a-z0-9][a-z0-9._-]{0,31}$"
Tag = Annotated[str, Field(pattern=TAG_PATTERN)]
Tags = Annotated[list[Tag], Field(max_length=16)]
Description = Annotated[str, Field(max_length=500)]


def tidy_tags(tags: list[str]) -> list[str]:
    """Tags as stored: each once, sorted."""
    return sorted(set(tags))


class ModelUpdate(BaseModel):
    """What an update changes (fields left out stay): its owner or an admin the description and tags, an admin the
    trusted mark."""

    model_config = ConfigDict(extra="forbid")

    description: Description | None = None
    tags: Tags | None = None
    trusted: StrictBool | None = None


class ModelQuery(BaseModel):
    """A search of the repository: every criterion given must hold (text: in the name or description, any case)."""

    model_config = ConfigDict(extra="forbid")

    text: Annotated[str, Field(max_length=100)] | None = None
    tags: list[Tag] = []  # every one of them
    format: ModelFormat | None = None  # the framework it was stored as
    architecture: Annotated[str, Field(max_length=100)] | None = None  # a language model's, or a canonical model's kind
    min_parameters: Annotated[int, Field(ge=0)] | None = None
    max_parameters: Annotated[int, Field(ge=0)] | None = None

    def keeps(self, model: ModelMeta) -> bool:
        """Whether the model meets every criterion (a parameter bound drops a model whose count is unknown)."""
        if self.text and self.text.lower() not in f"{model.name}\n{model.description}".lower():
            return False
        if not set(self.tags) <= set(model.tags) or (self.format is not None and model.format != self.format):
            return False
        if self.architecture is not None and self.architecture.lower() not in {a.lower() for a in model.architectures}:
            return False
        count = model.parameters
        if self.min_parameters is not None and (count is None or count < self.min_parameters):
            return False
        return not (self.max_parameters is not None and (count is None or count > self.max_parameters))


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
    description: Description = ""
    tags: Tags = []  # what its team files it under (`vision`, `prod`); searched, and shown on the leaderboard

    @property
    def architectures(self) -> set[str]:
        """What it is, as a search names it: a language model's architecture and type, a canonical model's kind."""
        found = {self.llm.architecture, self.llm.model_type} if self.llm is not None else set()
        return found | ({self.canonical.kind} if self.canonical is not None else set())

    @property
    def parameters(self) -> int | None:
        """Its parameter count where the upload says it (a language model's weights), else None."""
        return self.llm.parameters if self.llm is not None else None

    @property
    def is_llm(self) -> bool:
        """A language model, served over an OpenAI-compatible API rather than KServe v2."""
        return self.format == "hf"

    @property
    def ref(self) -> str:
        return f"{self.name}:{self.version}"
