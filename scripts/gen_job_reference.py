"""Write docs/job-yaml.md, the job YAML reference, from the JobSpec schema (so the doc cannot drift from the code)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "job-yaml.md"
sys.path.insert(0, str(ROOT))

from common.spec.job import JobSpec  # noqa: E402


def _type(prop: dict[str, Any]) -> str:
    if "$ref" in prop:
        name = prop["$ref"].rsplit("/", 1)[-1]
        return f"[{name}](#{name.lower()})"
    if "enum" in prop:
        return " \\| ".join(f"`{v}`" for v in prop["enum"])
    if "const" in prop:
        return f"`{prop['const']}`"
    if "anyOf" in prop:
        return " or ".join(_type(p) for p in prop["anyOf"] if p.get("type") != "null") + (
            " (optional)" if any(p.get("type") == "null" for p in prop["anyOf"]) else ""
        )
    if prop.get("type") == "array":
        return f"list of {_type(prop.get('items', {}))}"
    return str(prop.get("type", "any"))


def _limits(prop: dict[str, Any]) -> str:
    parts = []
    for key, label in (
        ("minimum", ">="),
        ("exclusiveMinimum", ">"),
        ("maximum", "<="),
        ("exclusiveMaximum", "<"),
        ("minLength", "min length"),
        ("maxLength", "max length"),
        ("minItems", "min items"),
        ("pattern", "pattern"),
    ):
        for candidate in [prop, *prop.get("anyOf", []), prop.get("items", {})]:
            if key in candidate:
                parts.append(f"{label} `{candidate[key]}`")
                break
    return ", ".join(parts)


def _table(name: str, schema: dict[str, Any]) -> list[str]:
    lines = [f"### {name}", ""]
    if schema.get("description"):
        lines += [schema["description"].strip(), ""]
    lines += ["| field | what it is | type | default | constraints |", "|---|---|---|---|---|"]
    required = set(schema.get("required", []))
    for field, prop in schema.get("properties", {}).items():
        default = (
            "**required**"
            if field in required
            else (
                "its fields' defaults"
                if isinstance(prop.get("default"), dict)
                else f"`{json.dumps(prop['default'])}`"
                if "default" in prop
                else "—"
            )
        )
        what = " ".join(description(prop).split()).replace("|", "\\|")
        lines.append(f"| `{field}` | {what} | {_type(prop)} | {default} | {_limits(prop)} |")
    return [*lines, ""]


def description(prop: dict[str, Any]) -> str:
    """A field's description (its docstring in the spec models), wherever the schema put it."""
    return str(prop.get("description") or next((p["description"] for p in prop.get("allOf", []) if "description" in p), ""))


def undescribed() -> list[str]:
    """Fields of the job YAML without a description (each must have one)."""
    schema = JobSpec.model_json_schema()
    tables = {"JobSpec": schema, **schema.get("$defs", {})}
    return [
        f"{name}.{field}"
        for name, sub in tables.items()
        for field, prop in sub.get("properties", {}).items()
        if not description(prop)
    ]


def render() -> str:
    """The reference as committed Markdown."""
    schema = JobSpec.model_json_schema()
    lines = [
        "# Job YAML reference",
        "",
        "Generated from `common.spec.job.JobSpec` by `python scripts/gen_job_reference.py`; "
        "`tests/unit/test_docs.py` fails when this file is stale. Durations accept `500ms`, `10s`, `2m`, `1h` or seconds; "
        "a scalar where a list is expected (`rate: 200`) is a one-entry list. Lists form the grid of benchmark points "
        "(backends × batch sizes × rates).",
        "",
        *_table("JobSpec", schema),
    ]
    for name, sub in sorted(schema.get("$defs", {}).items()):
        lines += _table(name, sub)
    return "\n".join(lines).rstrip() + "\n"


if __name__ == "__main__":
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(render())
    sys.stdout.write(f"wrote {OUT}\n")
