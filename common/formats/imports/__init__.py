"""Result files of other benchmark tools, read into one shape (model.Run): which tool wrote them (said, or recognised
from their contents), each load level's figures with the tool's own definitions, and its per-request records."""

from __future__ import annotations

import json
import math
from collections.abc import Callable

from common.formats.imports import llm_tools, tensor_tools
from common.formats.imports.model import ImportRefused, Run
from common.wire.imports import TOOL_NAMES, Tool

READERS: dict[Tool, Callable[[dict[str, bytes]], Run]] = {
    "vllm": llm_tools.vllm,
    "aiperf": llm_tools.aiperf,
    "guidellm": llm_tools.guidellm,
    "inference-perf": llm_tools.inference_perf,
    "genai-bench": llm_tools.genai_bench,
    "perf_analyzer": tensor_tools.perf_analyzer,
    "loadgen": tensor_tools.loadgen,
}
# What an import takes at most: its files, and their bytes in all (read and parsed in the leader's memory; a run of
# 20,000 requests with AIPerf's per-request JSONL is about 50 MB).
MAX_FILES = 8
MAX_IMPORT_BYTES = 64 * 1024 * 1024
# JSON keys only one tool writes at the top of a result file.
_JSON_MARKS: tuple[tuple[str, Tool], ...] = (
    ("aiperf_version", "aiperf"),
    ("benchmarks", "guidellm"),
    ("load_summary", "inference-perf"),
    ("aggregated_metrics", "genai-bench"),
    ("num_prompts", "vllm"),
)


def detect(files: dict[str, bytes]) -> Tool:
    """The tool whose files these are, from their contents; the refusal lists the tools read."""
    for name, data in files.items():
        head = data[:4096]
        if b"MLPerf Results Summary" in head or head.startswith(b":::MLLOG"):
            return "loadgen"
        if head.startswith(b"Concurrency,") or head.startswith(b"Request Rate,"):
            return "perf_analyzer"
        if name.endswith(".json") or head.lstrip().startswith(b"{"):
            try:
                doc = json.loads(data)
            except (json.JSONDecodeError, UnicodeDecodeError):
                continue
            if isinstance(doc, dict):
                for key, tool in _JSON_MARKS:
                    if key in doc:
                        return tool
    known = ", ".join(TOOL_NAMES.values())
    raise ImportRefused("known tool", ", ".join(files) or "no file", f"not recognised as a result of {known}; name its tool")


def read(files: dict[str, bytes], tool: Tool | None = None) -> Run:
    """The run these files hold (every file from one tool); ImportRefused naming the file and field otherwise."""
    if not files:
        raise ImportRefused(TOOL_NAMES[tool] if tool else "known tool", "file", "no file given")
    chosen = tool or detect(files)
    fmt, names = TOOL_NAMES[chosen], ", ".join(files)
    try:
        run = READERS[chosen](files)
    except ImportRefused:
        raise
    except (KeyError, TypeError, ValueError, IndexError, AttributeError, ZeroDivisionError, RecursionError) as exc:
        # A field the reader found but of another shape than the tool writes (a hostile or hand-edited file).
        raise ImportRefused(fmt, names, f"a field of an unexpected shape ({type(exc).__name__}: {exc})") from None
    if not run.levels:
        raise ImportRefused(fmt, names, "no load level in it")
    _finite(run, fmt, names)
    return run


def _finite(run: Run, fmt: str, names: str) -> None:
    """Every figure a finite number (JSON allows NaN and Infinity; no answer of benchfleet's carries them)."""
    for level in run.levels:
        for figure in ("latency", "ttft", "itl", "tpot"):
            for key, value in (getattr(level, figure) or {}).items():
                if not math.isfinite(value):
                    raise ImportRefused(fmt, names, f"{level.level}: {figure} {key} is {value}")
        numbers = [
            level.achieved_rate,
            level.rate,
            level.duration_s,
            level.output_tokens_per_s or 0.0,
            level.input_tokens_per_s or 0.0,
        ]
        numbers += [
            v for r in level.records for v in (r.latency_ms or 0.0, r.ttft_ms or 0.0, r.sent_s or 0.0, r.due_s or 0.0, *r.itl_ms)
        ]
        if not all(isinstance(v, int | float) and math.isfinite(v) for v in numbers):
            raise ImportRefused(fmt, names, f"{level.level}: a rate, duration or per-request time is not a finite number")
