"""What a parser makes of another tool's result files: a run of load levels, each with the tool's own figures and,
where the file keeps them, its per-request records; and the one error every refusal raises."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

import numpy as np

from common.wire.imports import Definitions, Tool

Pattern = Literal["poisson", "constant", "closed"]


class ImportRefused(ValueError):
    """A file that is not what its tool writes: the format expected and the field or line that failed."""

    def __init__(self, fmt: str, where: str, what: str) -> None:
        super().__init__(f"not a {fmt} result: {where}: {what}")
        self.fmt, self.where, self.what = fmt, where, what


@dataclass(frozen=True)
class Record:
    """One request as the file recorded it, in seconds on the tool's clock (None: the file does not say)."""

    sent_s: float | None  # when it was sent
    due_s: float | None  # when the tool's schedule meant it to be sent
    ok: bool
    latency_ms: float | None  # send to the answer's end
    ttft_ms: float | None  # send to the first token, by the tool's rule
    itl_ms: tuple[float, ...] = ()  # gaps between its token events, by the tool's rule
    output_tokens: int | None = None


@dataclass
class Level:
    """One load level of the run: the tool's own figures (ms) and its records."""

    level: str  # as the tool names it
    pattern: Pattern
    rate: float  # requested req/s; 0 for a closed loop
    concurrency: int | None
    requests: int
    ok: int
    duration_s: float
    achieved_rate: float
    latency: dict[str, float] | None
    ttft: dict[str, float] | None = None
    itl: dict[str, float] | None = None
    tpot: dict[str, float] | None = None
    output_tokens_per_s: float | None = None
    input_tokens_per_s: float | None = None
    behind: list[str] = field(default_factory=list)
    records: list[Record] = field(default_factory=list)


@dataclass
class Run:
    """Everything read from one tool's files."""

    tool: Tool
    version: str | None
    command: str | None
    model: str | None
    url: str | None
    kind: Literal["llm", "tensor"]
    definitions: Definitions
    levels: list[Level]
    started_at: datetime | None = None
    due_by: str | None = None  # what the records' due time is, in the tool's terms (None: they have none)
    settings: dict[str, str] = field(default_factory=dict)


def load_json(fmt: str, name: str, data: bytes) -> Any:
    """A JSON file, or the refusal naming the line the parser stopped at."""
    try:
        return json.loads(data)
    except json.JSONDecodeError as exc:
        raise ImportRefused(fmt, f"{name} line {exc.lineno}", f"not JSON ({exc.msg})") from None
    except UnicodeDecodeError:
        raise ImportRefused(fmt, name, "not UTF-8 text") from None
    except RecursionError:
        raise ImportRefused(fmt, name, "nested deeper than any result file") from None


def need(fmt: str, where: str, doc: Any, *path: str | int) -> Any:
    """doc[path[0]][path[1]]..., or the refusal naming the missing field."""
    at = doc
    for i, key in enumerate(path):
        try:
            at = at[key]
        except (KeyError, IndexError, TypeError):
            dotted = ".".join(str(k) for k in path[: i + 1])
            raise ImportRefused(fmt, where, f"field {dotted} missing") from None
    return at


def number(fmt: str, where: str, doc: Any, *path: str | int) -> float:
    """A finite number at path, or the refusal naming the field."""
    value = need(fmt, where, doc, *path)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ImportRefused(fmt, where, f"field {'.'.join(str(k) for k in path)} is not a number ({value!r})")
    return float(value)


def stats_of(values: list[float]) -> dict[str, float] | None:
    """A level's summary (ms) computed from the tool's own per-request values (numpy's linear quantiles)."""
    if not values:
        return None
    a = np.asarray(values, dtype=float)
    qs = np.percentile(a, [50, 90, 95, 99, 99.9])
    return {
        "count": float(len(a)),
        "mean": float(a.mean()),
        **dict(zip(("p50", "p90", "p95", "p99", "p999"), map(float, qs), strict=True)),
        "max": float(a.max()),
    }


def scaled(summary: dict[str, Any], scale: float, names: dict[str, str]) -> dict[str, float]:
    """The tool's summary keys renamed to benchfleet's Percentiles names (`names`: ours -> its) and scaled to ms; absent
    ones left out."""
    out = {}
    for ours, theirs in names.items():
        value = summary.get(theirs)
        if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
            out[ours] = float(value) * (1 if ours == "count" else scale)
    return out


def rate_behind(level: Level) -> None:
    """States a level whose achieved rate fell more than 5% below the requested (an open loop only)."""
    if level.rate > 0 and level.achieved_rate < 0.95 * level.rate:
        level.behind.append(
            f"achieved {level.achieved_rate:.3g} req/s of the {level.rate:g} requested "
            f"({100 * (1 - level.achieved_rate / level.rate):.0f}% short)"
        )
