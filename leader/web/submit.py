"""Submitting from the browser: a YAML editor checked as you type against the leader, templates, the schema's fields.

The page's script (static/submit.js) sends the YAML to `POST /api/v1/jobs/preview` while the user types: the same
checks as a submission, so the same 4xx message naming the same field, and on success what submitting would do (its
estimate, the follower placement would pick now, the jobs ahead). Submitting posts the same text to `POST
/api/v1/jobs` and opens the new job's page. Both carry the session's CSRF token; a viewer is shown no form, and the
API refuses its posts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from common.spec.job import JobSpec
from common.wire.models import ModelMeta
from leader.api import deps
from leader.store import models as models_store
from leader.web.login import require_login
from leader.web.render import render

router = APIRouter(include_in_schema=False)

MAX_DEPTH = 3  # nested sections shown in the field list (load.search.precision is three deep)


@dataclass(frozen=True)
class FieldDoc:
    """One field of the job schema: its dotted path, what it is, and its type."""

    path: str
    description: str
    kind: str
    depth: int


def _kind(prop: dict[str, Any]) -> str:
    if "$ref" in prop:
        return str(prop["$ref"].rsplit("/", 1)[-1])
    if "enum" in prop:
        return " | ".join(str(v) for v in prop["enum"])
    if "anyOf" in prop:
        return " or ".join(_kind(p) for p in prop["anyOf"] if p.get("type") != "null")
    if prop.get("type") == "array":
        return f"list of {_kind(prop.get('items', {}))}"
    return str(prop.get("type", "any"))


def _ref(prop: dict[str, Any]) -> str | None:
    """The definition a field's type names (itself, or the one non-null choice of an optional)."""
    for candidate in [prop, *prop.get("anyOf", [])]:
        if "$ref" in candidate:
            return str(candidate["$ref"].rsplit("/", 1)[-1])
    return None


def field_docs() -> list[FieldDoc]:
    """Every field of JobSpec (and of its sections, MAX_DEPTH deep) with its description, in schema order."""
    schema = JobSpec.model_json_schema()
    defs = schema.get("$defs", {})
    out: list[FieldDoc] = []

    def walk(node: dict[str, Any], prefix: str, depth: int) -> None:
        for name, prop in node.get("properties", {}).items():
            path = f"{prefix}{name}"
            out.append(FieldDoc(path, str(prop.get("description", "")).strip(), _kind(prop), depth))
            ref = _ref(prop)
            if ref is not None and ref in defs and depth + 1 < MAX_DEPTH:
                walk(defs[ref], f"{path}.", depth + 1)

    walk(schema, "", 0)
    return out


def templates(tensor: ModelMeta | None, llm: ModelMeta | None) -> dict[str, str]:
    """Starting points for the common jobs, naming one of the team's own models where it has one."""
    t = tensor.ref if tensor is not None else "my-model:1"
    m = llm.ref if llm is not None else "my-llm:1"
    return {
        "tensor sweep": (
            f"name: sweep\nmodel: {t}\nbackends: [onnxruntime]\nbatch_sizes: [1, 8]\n"
            "load: {pattern: poisson, rate: [50, 100, 200], duration: 10s, warmup: 2s}\nslo: {p99_ms: 20}\n"
        ),
        "SLO search": (
            f"name: capacity\nmodel: {t}\nbackends: [onnxruntime]\n"
            "load: {pattern: poisson, duration: 10s, warmup: 2s, search: {low: 10, high: 1000, precision: 0.05}}\n"
            "slo: {p99_ms: 20}\n"
        ),
        "LLM goodput search": (
            f"name: llm-goodput\nmodel: {m}\nbackends: [vllm]\n"
            "load: {pattern: poisson, duration: 20s, warmup: 5s, search: {low: 1, high: 32, precision: 0.1}}\n"
            "slo: {ttft_ms: 500, tpot_ms: 50, attainment: 0.95}\n"
            "llm: {api: completions, prompt_tokens: 128, output_tokens: 64}\n"
        ),
        "endpoint target": (
            f"name: endpoint\nmodel: {t.split(':')[0]}\nbackends: [endpoint]\n"
            "target: {url: 'http://my-service:8000', protocol: kserve-http}\n"
            "load: {pattern: poisson, rate: [50, 100], duration: 10s, warmup: 2s}\nslo: {p99_ms: 20}\n"
        ),
    }


@router.get("/submit", response_class=HTMLResponse)
async def submit_page(request: Request) -> HTMLResponse:
    """The YAML editor, the templates, and the schema's field list."""
    principal = await require_login(request)
    models = await models_store.list_models(deps.get_db(request), team=principal.scope)
    tensor = next((m for m in models if not m.is_llm), None)
    llm = next((m for m in models if m.is_llm), None)
    html = render(
        "submit.html",
        csrf=request.state.csrf,
        may_submit=principal.at_least("submitter"),
        role=principal.role,
        templates=templates(tensor, llm),
        fields=field_docs(),
    )
    return HTMLResponse(html)
