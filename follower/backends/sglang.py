"""The SGLang backend: SGLang's OpenAI-compatible server (sglang.launch_server) in its own environment.

The follower runs the Python of an environment with SGLang installed (.benchfleet/sglang, or
BENCHFLEET_FOLLOWER_SGLANG_PYTHON). SGLang's published builds target CUDA GPUs; its own CPU path is built from source
for Intel Xeon with AMX. On another CPU, PyPI's sglang (0.5.23 tried) falls back to torch-native attention and then
needs vLLM's compiled ops for its RoPE (`vllm._custom_ops`, imported on any device that is neither CUDA nor HIP): with
vLLM's CPU package on its path it served here, without it the model does not load. Where no environment is installed
the backend says so and jobs asking for it are not placed here. Metrics come from its /metrics (--enable-metrics):
sglang:* series.
"""

from __future__ import annotations

from pathlib import Path

from common.wire.models import ModelMeta
from follower.backends.llmserver import OpenAiServerBackend

# SGLang reserves a share of GPU memory for weights and KV cache; on a CPU build the same flag shares host memory.
MEM_FRACTION_DEFAULT = 0.8


class SglangBackend(OpenAiServerBackend):
    """Serves an "hf" model with SGLang (completions and chat, streaming; RadixAttention prefix caching)."""

    name = "sglang"
    python_setting = "BENCHFLEET_FOLLOWER_SGLANG_PYTHON"
    default_env = "sglang"
    dists = ("sglang",)
    install_hint = "a virtual environment with `pip install sglang`: a CUDA host, or a CPU one with AMX or vLLM's CPU ops"

    def argv(self, model_dir: Path, model: ModelMeta, port: int, workdir: Path) -> list[str]:
        """The server's command line: the spec's server.llm options in SGLang's words."""
        llm = self.server.llm
        argv = [
            str(self.python),
            "-m",
            "sglang.launch_server",
            "--model-path",
            str(model_dir),
            "--served-model-name",
            model.name,
            "--host",
            self.host,
            "--port",
            str(port),
            "--dtype",
            llm.dtype,
            "--enable-metrics",
            "--skip-server-warmup",
        ]
        if not self.server.uses_gpu:
            argv += ["--device", "cpu"]
        if model.llm is not None:
            argv += ["--context-length", str(llm.model_len(model.llm.context_length))]
        if llm.max_num_batched_tokens is not None:
            argv += ["--chunked-prefill-size", str(llm.max_num_batched_tokens)]
        if llm.max_num_seqs is not None:
            argv += ["--max-running-requests", str(llm.max_num_seqs)]
        if llm.prefix_caching is False:
            argv += ["--disable-radix-cache"]
        if llm.chunked_prefill is False:
            argv += ["--chunked-prefill-size", "-1"]  # SGLang's way to turn chunking off
        if llm.enforce_eager:
            argv += ["--disable-cuda-graph"]
        if llm.kv_cache_gb is not None:
            # SGLang sizes its KV cache as a share of memory, not in bytes: refused rather than silently translated.
            raise ValueError("server.llm.kv_cache_gb is vLLM's KV-cache size; SGLang takes a memory share (leave it unset)")
        return [*argv, "--mem-fraction-static", str(MEM_FRACTION_DEFAULT)]
