"""What every OpenAI-compatible language-model server the follower starts shares: its own Python environment, the
model directory unpacked after the leader's checks, readiness on /v1/models, requests to /v1/completions (chat is its
sibling), and its Prometheus metrics (vllm:* or sglang:*) as its view of a point.

Each server pins its own torch and friends, so it never shares benchfleet's environment: the follower runs the
interpreter of the server's environment (a setting per server). The model directory is unpacked from the upload after
the same checks the leader made (common/formats/hfbundle.py: no code, no pickles, nothing outside the directory) and served
without remote code, so nothing a user uploaded runs as the follower.
"""

from __future__ import annotations

import os
import re
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from common.formats import hfbundle
from common.wire.models import ModelMeta
from follower.backends.process import SOURCE_ROOT, ProcessBackend
from follower.protocols import Endpoint

_METRIC = re.compile(r"^((?:vllm|sglang|llamacpp):[a-zA-Z0-9_:]+)(\{[^}]*\})? ([0-9.eE+-]+|NaN|\+Inf)$")


def parse_metrics(text: str) -> dict[str, float]:
    """An LLM server's Prometheus metrics (vllm:*, sglang:*, llamacpp:*), one entry per series, labels other than the model's kept
    in the key."""
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


def installed_version(python: Path, dists: tuple[str, ...]) -> str | None:
    """A server's version from its environment's package metadata (read from disk: importing it takes seconds)."""
    lib = python.parent.parent / "lib"
    for dist in sorted(lib.glob("python3*/site-packages/*.dist-info")):
        name, _, rest = dist.name.partition("-")
        if name in dists:
            return f"{name.replace('_', '-')} {rest.removesuffix('.dist-info')}"
    return None


class OpenAiServerBackend(ProcessBackend):
    """A language-model server in its own environment speaking the OpenAI API; subclasses give its command line."""

    name = "openai-server"
    python_setting = ""  # the environment variable naming the server environment's interpreter
    default_env = ""  # its default place under .benchfleet/
    dists: tuple[str, ...] = ()  # the distributions whose version names the server
    install_hint = ""  # how an operator makes the environment

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.python = self.interpreter()

    @classmethod
    def interpreter(cls) -> Path:
        return Path(os.environ.get(cls.python_setting) or SOURCE_ROOT / ".benchfleet" / cls.default_env / "bin" / "python")

    @classmethod
    def why_missing(cls) -> str:
        """Why the server cannot run here, for skip messages and errors: where it looked, and what named that place
        (the setting, as an image sets it, or the default an install script fills)."""
        program = cls.interpreter()
        setting = os.environ.get(cls.python_setting)
        named = f"{cls.python_setting}={setting}" if setting else f"the default place; {cls.python_setting} names another"
        if program.exists() and cls.dists:
            lib = program.parent.parent / "lib" / "python3*" / "site-packages"
            found = f"{program} has no {' or '.join(cls.dists)} distribution in {lib}"
        else:
            found = f"no {cls.name} environment at {program}"
        failed = SOURCE_ROOT / ".benchfleet" / f"{cls.default_env}.FAILED"
        detail = f" ({failed.read_text().strip()})" if failed.exists() and not setting else ""
        return f"{found} ({named}; {cls.install_hint}){detail}"

    @classmethod
    def available(cls) -> tuple[bool, str]:
        """Whether the server's environment is installed here, and why not."""
        version = installed_version(cls.interpreter(), cls.dists) if cls.interpreter().exists() else None
        return (True, version) if version else (False, cls.why_missing())

    def version(self) -> str:
        return installed_version(self.python, self.dists) or "absent"

    def argv(self, model_dir: Path, model: ModelMeta, port: int, workdir: Path) -> list[str]:
        raise NotImplementedError

    def environment(self) -> dict[str, str]:
        """The scrubbed environment (no PYTHONPATH: the server's environment has its own packages), its GPU named."""
        env = super().environment()
        if self.server.uses_gpu:
            env["CUDA_VISIBLE_DEVICES"] = str(self.server.gpu_index)
        return env

    def runtime_paths(self) -> list[Path]:
        """The server's environment and the Python it was made from (pyvenv.cfg's `home`)."""
        venv = self.python.parent.parent
        paths = [venv]
        cfg = venv / "pyvenv.cfg"
        if cfg.is_file():
            for line in cfg.read_text().splitlines():
                key, _, value = line.partition("=")
                if key.strip() == "home" and value.strip():
                    paths.append(Path(value.strip()).parent)
        return paths

    def start(self, model_path: Path, model: ModelMeta, workdir: Path) -> None:
        """Unpack the model directory (checked again) and spawn the server on a free loopback port."""
        if not model.is_llm:
            raise RuntimeError(f"the {self.name} backend serves language models (format hf), not {model.format}")
        if not self.python.exists():
            raise RuntimeError(self.why_missing())
        source = Path(model_path)
        model_dir = hfbundle.extract(source, Path(workdir) / "model", limit_bytes=hfbundle.unpack_limit(source))
        served = self.prepare(model_dir, model, Path(workdir))
        port = self._new_port()
        self._spawn(self.argv(served, model, port, Path(workdir)), workdir, model, env=self.environment())

    def prepare(self, model_dir: Path, model: ModelMeta, workdir: Path) -> Path:
        """What the server is given to serve, made from the unpacked model directory (here: the directory itself)."""
        return model_dir

    def ready_url(self) -> str:
        """The server answers its model list once the engine is up."""
        return f"{self.endpoint}/v1/models"

    def serves(self, model: ModelMeta) -> Endpoint:
        """Its OpenAI-compatible API (completions; chat completions is routed by the workload)."""
        return Endpoint("openai", self.endpoint, model.name)

    def reset_prefix_cache(self) -> bool:
        """Empty the server's prefix cache (server.llm.reset_prefix_cache); whether it was (False: it offers none)."""
        return False

    def stats(self) -> dict[str, Any]:
        """The server's own Prometheus metrics (time to first token, inter-token latency, queue, KV-cache use...)."""
        if self.process is None or not self.process.alive():
            return {}
        try:
            with urllib.request.urlopen(f"{self.endpoint}/metrics", timeout=2.0) as response:  # noqa: S310 - loopback
                return {"metrics": parse_metrics(response.read().decode("utf-8", "replace"))}
        except (urllib.error.URLError, OSError, ValueError):
            return {}
