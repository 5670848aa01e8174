"""What a leaderboard query is made of: the columns (their kinds and the short names people type), filters parsed and
applied to a row, and the rows' order (absent values last either way, ties by id). Nothing here reads PerfDB."""

from __future__ import annotations

import operator
import re
from typing import Any

from common.errors import InvalidRequest
from leader.store import rowcounts

# Every column filters; the sortable ones (rowcounts: counted per sort bucket) first, then those that only filter.
NUMERIC = rowcounts.NUMBERS + (
    "p99_ci_high_ms",
    "service_p99_ms",
    "requests",
    "errors",
    "co2_g_per_1m",
    "index",
    "attempt",
    "repeat",
    "slo_p99_ms",
    "depth",
    "width",
    "input_size",
    "flops_per_inference",
    "bytes_per_inference",
    "ttft_p99_ci_high_ms",
    "search_lowest_fail",
    "search_probes",
    "accuracy",
    "accuracy_low",
    "accuracy_high",
    "accuracy_samples",
)
TEXT = rowcounts.TEXT + (
    "follower_id",
    "job_id",
    "job_name",
    "pattern",
    "started_at",
    "kind",
    "team",
    "search_stopped",
    "options",
    "role",
    "tags",  # the model's tags: `filter=tags:vision` keeps the rows of models tagged vision
)
BOOL = rowcounts.FLAGS + ("slo_met",)
COLUMNS = NUMERIC + TEXT + BOOL
# Short names people type (`sort=p99`).
ALIASES = {
    "p99": "p99_ms",
    "p50": "p50_ms",
    "batch": "batch_size",
    "cost": "cost_usd_per_1m",
    "energy": "energy_wh_per_1m",
    "co2": "co2_g_per_1m",
    "job": "job_id",
    "follower": "follower_id",
    "throughput_rps": "throughput",
    "ttft": "ttft_p99_ms",
    "tpot": "tpot_p99_ms",
    "itl": "itl_p99_ms",
    "tokens": "tokens_per_s",
    "goodput": "goodput_rps",
    "attainment": "goodput_share",
    "cost_tokens": "cost_usd_per_1m_tokens",
}
_FILTER_RE = re.compile(r"^\s*([A-Za-z0-9_]+)\s*(<=|>=|!=|:|=|<|>)\s*(.*?)\s*$")


def column(name: str, field: str) -> str:
    """A known column name (aliases resolved), or InvalidRequest naming the field."""
    resolved = ALIASES.get(name, name)
    if resolved not in COLUMNS:
        raise InvalidRequest(f"unknown column {name!r}; known: {', '.join(COLUMNS)}", field=field)
    return resolved


def _as_bool(text: str) -> bool:
    lowered = text.lower()
    if lowered in {"true", "yes", "1"}:
        return True
    if lowered in {"false", "no", "0"}:
        return False
    raise InvalidRequest(f"expected true or false, got {text!r}", field="filter")


def parse_filter(text: str) -> tuple[str, str, Any]:
    """`backend:triton`, `p99<20`, `batch>=8`, `valid:true`, `model!=x` → (column, operator, value)."""
    match = _FILTER_RE.match(text)
    if not match:
        raise InvalidRequest(f"filter must be column:value or column<number, got {text!r}", field="filter")
    name, op, raw = match.groups()
    col = column(name, "filter")
    op = "=" if op == ":" else op
    if col in NUMERIC:
        try:
            return col, op, float(raw)
        except ValueError:
            raise InvalidRequest(f"filter on {col} needs a number, got {raw!r}", field="filter") from None
    if op not in {"=", "!="}:
        raise InvalidRequest(f"filter on {col} takes : or !=, not {op}", field="filter")
    return col, op, (_as_bool(raw) if col in BOOL else raw)


Filter = tuple[str, str, Any]
RANGES = {"<": "$lt", "<=": "$lte", ">": "$gt", ">=": "$gte"}
COMPARE = {"=": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge}


def _text(value: Any) -> str:
    """A text column's value: a list (tags) as its items joined by commas."""
    return ",".join(str(v) for v in value) if isinstance(value, list) else str(value)


def matches(row: dict[str, Any], filters: list[Filter]) -> bool:
    """Whether a row passes every filter: numbers compare when present (an absent value passes none, `!=` neither),
    flags are numbers 1/0, tags hold the value among them, other text matches exactly (`!=` passes absent text)."""
    for col, op, value in filters:
        got = row.get(col)
        if col in NUMERIC or col in BOOL:
            if got is None or got != got:  # absent, or NaN
                return False
            ok = COMPARE[op](float(got), float(value))
        elif col == "tags":
            ok = (value in (got or [])) == (op == "=")
        else:
            ok = (got is not None and _text(got) == value) == (op == "=")
        if not ok:
            return False
    return True


def sort_rows(rows: list[dict[str, Any]], col: str, descending: bool) -> list[dict[str, Any]]:
    """Rows in sort order: by the column (text by its characters, flags as 0/1), absent values last either way, ties
    by id."""
    rows = sorted(rows, key=lambda r: r["_id"])
    present = [r for r in rows if r.get(col) is not None and r[col] == r[col]]  # (NaN is absent)
    absent = [r for r in rows if r.get(col) is None or r[col] != r[col]]
    if col in NUMERIC or col in BOOL:
        present.sort(key=lambda r: float(r[col]), reverse=descending)
    else:
        present.sort(key=lambda r: _text(r[col]), reverse=descending)
    return present + absent
