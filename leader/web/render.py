"""The pages' templates and the helpers they use."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, select_autoescape

from common.spec.sweep import label as sweep_label
from common.wire.imports import TOOL_NAMES

HERE = Path(__file__).parent
env = Environment(loader=FileSystemLoader(HERE / "templates"), autoescape=select_autoescape(["html"]))


def num(value: Any, digits: int = 2) -> str:
    """A number for a table cell; absent (or not measurable) is an em dash, never 0."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    return f"{value:.{digits}f}"


def pct(share: float | None) -> str:
    """A relative difference as a signed percentage; absent is an em dash."""
    return "—" if share is None else f"{100 * share:+.2f}%"


def share(value: float | None) -> str:
    """A share (0..1) as a percentage; absent is an em dash."""
    return "—" if value is None else f"{100 * value:.1f}%"


def size(n: int) -> str:
    """A byte count as people read it: 512 B, 3.2 KiB, 4.1 MiB, 1.5 GiB."""
    value, unit = float(n), "B"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            break
        value /= 1024
    return f"{int(value)} B" if unit == "B" else f"{value:.1f} {unit}"


env.globals["num"] = num
env.globals["size"] = size
env.globals["pct"] = pct
env.globals["share"] = share
env.globals["sweep_label"] = sweep_label
env.globals["tool_names"] = TOOL_NAMES  # the tools an imported run may come from, by their names


def render(name: str, **context: Any) -> str:
    """Render a template."""
    return env.get_template(name).render(**context)
