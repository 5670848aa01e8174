"""Sweeps over server options: a job's `sweep` maps option paths to the values to try; every combination is a server
configuration of its own (a server start of its own), crossed with the grid's backends, batch sizes and loads."""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from common.errors import field_errors

if TYPE_CHECKING:
    from common.spec.server import ServerOptions

# The option paths a sweep may vary (ServerOptions' fields, `llm.` the LLM engine's, `dynamic_batching.` the
# server-side batcher's: Triton's, and our ORT server's). `dynamic_batching` itself takes null (off) or a batcher's
# settings: the batching-on-versus-off study in one job.
SWEEPABLE = (
    "threads",
    "instances",
    "precision",
    "dynamic_batching",
    "dynamic_batching.max_batch_size",
    "dynamic_batching.max_queue_delay_us",
    "dynamic_batching.preferred_batch_sizes",
    "llm.max_num_seqs",
    "llm.max_num_batched_tokens",
    "llm.max_model_len",
    "llm.kv_cache_gb",
    "llm.prefix_caching",
    "llm.chunked_prefill",
    "llm.dtype",
    "llm.enforce_eager",
)
MAX_VALUES = 16
MAX_CONFIGS = 64


def _with(server: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    head, _, rest = path.partition(".")
    if not rest:
        return {**server, head: value}
    inner = server.get(head) or {}
    return {**server, head: _with(inner if isinstance(inner, dict) else {}, rest, value)}


def configurations(sweep: dict[str, list[Any]], server: ServerOptions) -> list[ServerOptions]:
    """Every combination of the sweep's values applied to the job's server options, in a stable order (the last path
    varies fastest); a ValueError naming the path and value that is not a valid option."""
    from common.spec.server import ServerOptions

    unknown = [path for path in sweep if path not in SWEEPABLE]
    if unknown:
        raise ValueError(f"cannot sweep {', '.join(map(repr, unknown))}; the options a sweep may vary: {', '.join(SWEEPABLE)}")
    if "dynamic_batching" in sweep and any(path.startswith("dynamic_batching.") for path in sweep):
        raise ValueError("sweeps dynamic_batching whole (null: off, or its settings) or by its fields, not both")
    for path, values in sweep.items():
        if not isinstance(values, list) or not 1 <= len(values) <= MAX_VALUES:
            raise ValueError(f"{path}: must be a list of 1 to {MAX_VALUES} values")
        if len({repr(v) for v in values}) != len(values):
            raise ValueError(f"{path}: must not repeat a value")
    count = 1
    for values in sweep.values():
        count *= len(values)
    if count > MAX_CONFIGS:
        raise ValueError(f"has {count} combinations; at most {MAX_CONFIGS} server configurations per job")
    base = server.model_dump(mode="json")
    out = []
    for combination in itertools.product(*sweep.values()):
        doc = base
        for path, value in zip(sweep, combination, strict=True):
            doc = _with(doc, path, value)
        try:
            out.append(ServerOptions.model_validate(doc))
        except ValidationError as exc:
            first = field_errors(exc)[0]
            raise ValueError(
                f"{first['field']}: {first['message']} (in the combination {dict(zip(sweep, combination, strict=True))})"
            ) from None
    return out


def describe(server: ServerOptions) -> str:
    """The options that differ from the defaults, as a user reads them ("" for none): threads=2 llm.max_num_seqs=8."""

    def flat(doc: dict[str, Any], prefix: str = "") -> list[str]:
        parts = []
        for key, value in doc.items():
            if isinstance(value, dict):
                parts += flat(value, f"{prefix}{key}.")
            else:
                parts.append(f"{prefix}{key}={value}")
        return parts

    return " ".join(flat(server.model_dump(mode="json", exclude_defaults=True)))


def label(sweep: dict[str, list[Any]] | None, server: ServerOptions) -> str:
    """A swept point's configuration as a user reads it: each swept option's value ("" without a sweep)."""
    if not sweep:
        return ""
    doc: Any = server.model_dump(mode="json")
    parts = []
    for path in sweep:
        value = doc
        for key in path.split("."):
            value = value.get(key) if isinstance(value, dict) else None
        parts.append(f"{path.removeprefix('llm.').removeprefix('dynamic_batching.')}={_shown(value)}")
    return " ".join(parts)


def _shown(value: Any) -> str:
    """A swept value as a user reads it: a batcher's settings as k=v pairs, null as off."""
    if value is None:
        return "off"
    if isinstance(value, dict):
        return "(" + ",".join(f"{k}={_shown(v)}" for k, v in value.items() if v not in ([], None)) + ")"
    return str(value)
