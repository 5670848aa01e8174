"""Compare across tools: a point another tool measured (imported) beside benchfleet's or another tool's, keyed on what
is comparable (the arrival pattern and load, not the backend a job named), figured by benchfleet's definitions where
the tool's per-request records allowed the recomputation, and saying which definitions differ and how far that moves
each figure. An imported point decides nothing unless the compare opts in (`include_imported`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from common.spec.job import load_label
from common.wire.imports import TOOL_NAMES

# A compared row's figures and the recomputed figure (common.wire.imports.Recomputed) that stands for it.
FIGURES = {"p99_ms": "latency_p99_ms", "ttft_p99_ms": "ttft_p99_ms", "itl_p99_ms": "itl_p99_ms", "tpot_p99_ms": "tpot_p99_ms"}


def has_imported(*jobs: list[dict[str, Any]]) -> bool:
    return any(row.get("imported") for rows in jobs for row in rows)


def cross_key(row: dict[str, Any], dims: Sequence[str]) -> str:
    """What makes a point of one tool the same experiment as another's: the arrival pattern and load (rate or users),
    and each of `dims` the row has; the backend and batch a job named are not (an imported run names none)."""
    load = load_label(row["pattern"], row["rate"], row.get("concurrency"))
    run = f"|run {row['repeat'] + 1}" if row.get("repeat") else ""
    extra = "".join(f"|{dim} {row[dim]}" for dim in dims if row.get(dim))
    return f"{row['pattern']}|{load}{extra}{run}"


def as_compared(row: dict[str, Any]) -> dict[str, Any]:
    """An imported row with benchfleet's figures recomputed from the tool's records in place of the tool's, where the
    files had them (the others stay the tool's, and the notes say so)."""
    mine = (row.get("imported") or {}).get("recomputed")
    if not mine:
        return row
    return {**row, **{column: mine[key] for column, key in FIGURES.items() if mine.get(key) is not None}}


def notes(name: str, row: dict[str, Any] | None) -> list[str]:
    """What a side's figures are, when another tool measured them: its definitions, what benchfleet recomputed (and how
    far that moved each figure), where it fell behind."""
    origin = (row or {}).get("imported")
    if not origin:
        return []
    tool = TOOL_NAMES[origin["tool"]]
    defs = origin["definitions"]
    mine = origin.get("recomputed")
    out = [f"{name}: measured by {tool} ({origin['level']}); its latency {defs['latency']}"]
    if defs.get("ttft"):
        out.append(f"{name}: its TTFT {defs['ttft']}; its ITL {defs.get('itl')}")
    if mine:
        shifts = ", ".join(f"{k.removesuffix('_ms').replace('_', ' ')} {100 * v:+.1f}%" for k, v in mine["shift"].items())
        out.append(
            f"{name}: compared by benchfleet's definitions, recomputed from its {mine['requests']} records (latency and "
            f"TTFT from {mine['counted_from']}); against {tool}'s own figures: {shifts or 'none to set beside'}"
        )
    else:
        out.append(f"{name}: {tool}'s own figures under its definitions (its files keep no per-request records to recompute)")
    out += [f"{name}: {b}" for b in origin.get("behind") or []]
    return out
