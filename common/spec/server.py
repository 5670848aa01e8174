"""How the serving system a job starts is configured: its server options (each backend applies what it supports),
server-side dynamic batching and an LLM engine's settings."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, Literal

from pydantic import Field

from common.base import StrictModel
from common.devices import GPU_PROVIDERS

MAX_BATCH = 4_096
DEFAULT_MAX_MODEL_LEN = 4096  # an LLM server's sequence length unless server.llm.max_model_len says otherwise


class DynamicBatching(StrictModel):
    """Server-side dynamic batching: requests wait up to `max_queue_delay_us` to be merged into one run."""

    max_batch_size: Annotated[int, Field(gt=0, le=MAX_BATCH)] = 32
    """The largest batch the server forms."""
    preferred_batch_sizes: list[Annotated[int, Field(gt=0, le=MAX_BATCH)]] = []
    """Batch sizes the server prefers to form (Triton's preferred_batch_size)."""
    max_queue_delay_us: Annotated[int, Field(ge=0, le=10_000_000)] = 100
    """How long a request may wait, in microseconds, to be batched with others."""


class LlmServerOptions(StrictModel):
    """An LLM server's engine settings, under vLLM's names (SGLang gets its equivalents); unset: the server's default."""

    max_model_len: Annotated[int, Field(gt=0, le=1_048_576)] | None = None
    """Tokens a sequence may hold (llama.cpp: each slot's context)."""
    max_num_batched_tokens: Annotated[int, Field(gt=0, le=1_048_576)] | None = None
    """Tokens per engine step (llama.cpp: --batch-size and --ubatch-size)."""
    max_num_seqs: Annotated[int, Field(gt=0, le=65_536)] | None = None
    """Sequences per engine step (llama.cpp: its slots, --parallel; unset there: 4)."""
    kv_cache_gb: Annotated[float, Field(gt=0, le=4096)] | None = None
    """KV-cache space (CPU: VLLM_CPU_KVCACHE_SPACE)."""
    prefix_caching: bool | None = None
    """Reuse the KV cache of a shared prompt prefix (llama.cpp: --cache-prompt)."""
    chunked_prefill: bool | None = None
    """Split long prefills into chunks scheduled beside decodes (vLLM's --enable-chunked-prefill)."""
    dtype: Literal["auto", "bfloat16", "float16", "float32", "q8_0", "q4_0"] = "auto"
    """The data type the server computes in (llama.cpp: the GGUF file's, auto meaning float16; q8_0 and q4_0 are
    llama.cpp's quantised types, 8-bit and 4-bit blocks of 32 weights with a float16 scale each)."""
    runner: Literal["generate", "pooling"] | None = None
    """vLLM's runner: pooling serves embeddings (/v1/embeddings; llama.cpp: --embeddings), set for a job of llm.api
    embeddings; unset: the model's own (generate, for a causal LM)."""
    reset_prefix_cache: bool = False
    """Empty the server's prefix cache before each point, so a point does not find what the one before it cached
    (vLLM: its /reset_prefix_cache, one of the development routes VLLM_SERVER_DEV_MODE serves on the loopback port it
    listens on; llama.cpp: every slot's cache erased, /slots/N?action=erase; a server without one is run as usual).
    Each point's `llm.server.cache_reset` says whether it was."""
    enforce_eager: bool | None = None
    """Run the model eagerly: no compiled graph, no CUDA graphs (vLLM's --enforce-eager, SGLang's --disable-cuda-graph):
    a faster start and less memory, usually slower steps."""

    def model_len(self, context_length: int) -> int:
        """Tokens a sequence may hold on the server: the set max_model_len, else the model's context up to 4,096
        (what a server reserves KV-cache room for; the CPU build's default space holds that)."""
        return self.max_model_len or min(context_length, DEFAULT_MAX_MODEL_LEN)


# The numeric precision onnxruntime serves a model in (follower/servers/ort_server.py converts as it loads).
Precision = Literal["float32", "int8_dynamic", "int8_static", "float16"]
PRECISION_BACKENDS = frozenset({"onnxruntime"})
# The llm.dtype values only llama.cpp serves (the model converted to a quantised GGUF file as it starts).
QUANTISED_DTYPES = frozenset({"q8_0", "q4_0"})
QUANTISED_BACKENDS = frozenset({"llamacpp"})


class ServerOptions(StrictModel):
    """How the serving system is configured (each backend applies what it supports; defaults keep old YAML valid)."""

    dynamic_batching: DynamicBatching | None = None
    """Server-side dynamic batching; unset: off."""
    instances: Annotated[int, Field(gt=0, le=64)] = 1
    """Model instances the server runs (Triton's instance group count)."""
    threads: Annotated[int, Field(gt=0, le=256)] | None = None
    """Threads per instance for the model's operators; unset: the server's default."""
    execution_provider: Annotated[str, Field(pattern=r"^[A-Za-z]{1,64}$")] = "CPUExecutionProvider"
    """onnxruntime's execution provider."""
    protocol: Literal["http", "grpc"] = "http"
    """KServe v2 over HTTP or gRPC."""
    preprocess: Annotated[str, Field(pattern=r"^[a-z0-9_]{1,64}$")] | None = None
    """The processor the server runs on each request (follower.servers.processing); set from `data` when
    `data.processing: server`."""
    postprocess: Annotated[str, Field(pattern=r"^[a-z0-9_]{1,64}$")] | None = None
    """The processor the server runs on each answer; set from `data` like `preprocess`."""
    device: Annotated[str, Field(pattern=r"^(cpu|cuda(:[0-9]{1,2})?)$")] = "cpu"
    """Where the model runs: TorchScript moves module and tensors there, onnxruntime takes CUDAExecutionProvider (unless
    execution_provider names another GPU provider), Triton gets KIND_GPU instances on that GPU."""
    llm: LlmServerOptions = LlmServerOptions()
    """The engine settings of LLM servers (vllm, sglang, triton-openai, llamacpp)."""
    precision: Precision = "float32"
    """The numbers onnxruntime serves the model in, converted by its server as it loads (inside its cold start; what
    it costs in quality, a job's `quality:` shows): `int8_dynamic` quantizes the weights to INT8 (activations at run
    time), `float16` converts weights and activations to float16 (inputs and outputs stay float32). Sweep it to see
    the trade-off: `sweep: {precision: [float32, int8_dynamic, float16]}`. onnxruntime only."""

    @property
    def uses_gpu(self) -> bool:
        """Whether this configuration runs the model on a GPU."""
        return self.device != "cpu" or self.execution_provider in GPU_PROVIDERS

    @property
    def ort_provider(self) -> str:
        """The onnxruntime execution provider to ask for: `device: cuda` upgrades the CPU default to CUDA."""
        if self.device != "cpu" and self.execution_provider == "CPUExecutionProvider":
            return "CUDAExecutionProvider"
        return self.execution_provider

    @property
    def gpu_index(self) -> int:
        """The GPU ordinal of `device` (cuda → 0)."""
        return int(self.device.partition(":")[2] or 0)


def conversion_problem(
    server: ServerOptions, sweep: dict[str, list[Any]], backends: Sequence[str], *, uploaded: bool
) -> str | None:
    """Why a job's conversions cannot be served (a precision, or llama.cpp's quantised types, asked of a backend that
    does not convert so; static INT8 without the request data it calibrates on), or None."""
    precisions = {server.precision, *(v for v in sweep.get("precision", []) if isinstance(v, str))}
    dtypes = {server.llm.dtype, *(v for v in sweep.get("llm.dtype", []) if isinstance(v, str))}
    for asked, served_by, what in (
        (precisions != {"float32"}, PRECISION_BACKENDS, "server.precision converts the model for onnxruntime"),
        (bool(dtypes & QUANTISED_DTYPES), QUANTISED_BACKENDS, "server.llm.dtype q8_0 and q4_0 are llama.cpp's GGUF types"),
    ):
        if asked and (others := [b for b in backends if b not in served_by]):
            return f"{what}; {', '.join(others)} cannot serve the model so"
    if "int8_static" in precisions and not uploaded:
        return "server.precision int8_static calibrates on the job's request data: give data: {source: upload, id: ...}"
    return None
