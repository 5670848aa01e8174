"""The Triton OpenAI backend: Triton Inference Server's OpenAI-compatible frontend over its vLLM backend.

Triton's frontend (python/openai/openai_frontend/main.py in NVIDIA's server repository, shipped in the tritonserver
containers under /opt/tritonserver/python/openai) runs Triton in-process through its `tritonserver` Python bindings
and serves /v1/completions and /v1/chat/completions. The follower writes a model repository holding one model for
Triton's vLLM backend (config.pbtxt and model.json with the spec's server.llm options) and starts the frontend with the
interpreter of an environment holding those bindings (BENCHFLEET_FOLLOWER_TRITON_OPENAI_PYTHON, default
.benchfleet/triton-openai) and the frontend's main.py (BENCHFLEET_FOLLOWER_TRITON_OPENAI_FRONTEND). The bare
tritonserver binary benchfleet uses for tensor models (../shared/TRITON.md) has neither the Python bindings nor the
vLLM backend, so where they are missing the backend says so and jobs asking for it are not placed here.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from common.wire.models import ModelMeta
from follower.backends.llmserver import OpenAiServerBackend

DEFAULT_FRONTEND = Path("/opt/tritonserver/python/openai/openai_frontend/main.py")


def frontend_main() -> Path:
    return Path(os.environ.get("BENCHFLEET_FOLLOWER_TRITON_OPENAI_FRONTEND") or DEFAULT_FRONTEND)


class TritonOpenAiBackend(OpenAiServerBackend):
    """Serves an "hf" model with Triton's OpenAI-compatible frontend and its vLLM backend."""

    name = "triton-openai"
    python_setting = "BENCHFLEET_FOLLOWER_TRITON_OPENAI_PYTHON"
    default_env = "triton-openai"
    dists = ("tritonserver",)
    install_hint = "an environment with Triton's tritonserver Python bindings and vLLM backend, as in NVIDIA's containers"

    @classmethod
    def available(cls) -> tuple[bool, str]:
        ok, why = super().available()
        if ok and not frontend_main().exists():
            return False, f"no Triton OpenAI frontend at {frontend_main()} (BENCHFLEET_FOLLOWER_TRITON_OPENAI_FRONTEND)"
        return ok, why

    def repository(self, model_dir: Path, model: ModelMeta, workdir: Path) -> Path:
        """A model repository with the model for Triton's vLLM backend; its engine arguments from server.llm."""
        llm = self.server.llm
        engine: dict[str, object] = {
            "model": str(model_dir),
            "served_model_name": model.name,
            "dtype": llm.dtype,
            "disable_log_stats": False,
            "trust_remote_code": False,
        }
        if model.llm is not None:
            engine["max_model_len"] = llm.model_len(model.llm.context_length)
        if llm.max_num_batched_tokens is not None:
            engine["max_num_batched_tokens"] = llm.max_num_batched_tokens
        if llm.max_num_seqs is not None:
            engine["max_num_seqs"] = llm.max_num_seqs
        if llm.prefix_caching is not None:
            engine["enable_prefix_caching"] = llm.prefix_caching
        if llm.chunked_prefill is not None:
            engine["enable_chunked_prefill"] = llm.chunked_prefill
        if llm.enforce_eager is not None:
            engine["enforce_eager"] = llm.enforce_eager
        if llm.kv_cache_gb is not None:
            engine["kv_cache_memory_bytes"] = int(llm.kv_cache_gb * 2**30)
        version = Path(workdir) / "repository" / model.name / "1"
        version.mkdir(parents=True, exist_ok=True)
        (version / "model.json").write_text(json.dumps(engine, indent=1))
        # The vLLM backend reports vLLM's own histograms (vllm:*) through Triton's metrics when asked to.
        (version.parent / "config.pbtxt").write_text(
            'backend: "vllm"\ninstance_group [{ count: 1, kind: KIND_MODEL }]\n'
            'parameters: { key: "REPORT_CUSTOM_METRICS" value: { string_value: "true" } }\n'
        )
        return version.parent.parent

    def argv(self, model_dir: Path, model: ModelMeta, port: int, workdir: Path) -> list[str]:
        """The frontend's command line."""
        repository = self.repository(model_dir, model, workdir)
        return [
            str(self.python),
            str(frontend_main()),
            "--model-repository",
            str(repository),
            "--tokenizer",
            str(model_dir),
            "--backend",
            "vllm",
            "--host",
            self.host,
            "--openai-port",
            str(port),
            "--uvicorn-log-level",
            "warning",
        ]
