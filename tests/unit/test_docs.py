"""The job YAML reference in docs/ is generated from the JobSpec schema; this fails when it is stale."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_job_yaml_reference_matches_the_schema() -> None:
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import gen_job_reference
    finally:
        sys.path.pop(0)
    committed = (ROOT / "docs" / "job-yaml.md").read_text()
    assert committed == gen_job_reference.render(), "docs/job-yaml.md is stale: run python scripts/gen_job_reference.py"
    for field in ("`batch_sizes`", "`load`", "### LoadSpec", "`p99_ms`"):
        assert field in committed
    assert gen_job_reference.undescribed() == []  # every field says what it is (its docstring in the spec models)
    assert "| `seed` | The seed of every random draw" in committed


def _flow_loads(text: str) -> list[str]:
    """Every `load: {...}` flow mapping in a text (the README's and docs' jobs, printf'd or in YAML blocks)."""
    out = []
    for start in (i for i in range(len(text)) if text.startswith("load: {", i)):
        depth, i = 0, start + len("load: ")
        for i in range(start + len("load: "), len(text)):
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            if depth == 0:
                break
        out.append(text[start + len("load: ") : i + 1])
    return out


def test_every_example_job_is_long_enough_for_its_p99() -> None:
    """Valid by construction: each load in the README, the docs and the demo's embedded jobs offers every point the
    requests a p99 needs (common/spec/load.py: LoadSpec.p99_shortfall); the README's compose job once held 200 and was
    invalid every time it ran."""
    import yaml

    from common.spec.load import LoadSpec

    texts = {str(p.relative_to(ROOT)): p.read_text() for p in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]}
    texts |= {"benchfleet/demo.py": (ROOT / "benchfleet" / "demo.py").read_text()}
    checked = 0
    for where, text in texts.items():
        for flow in _flow_loads(text):
            if "<" in flow:  # a placeholder (`{dataset: <id>}`): not a job as written
                continue
            load = LoadSpec.model_validate(yaml.safe_load(flow.replace("\\n", "")))
            assert load.p99_shortfall() is None, (where, flow, load.p99_shortfall())
            checked += 1
    assert checked >= 8, checked  # the README's newcomer, compose and LLM jobs, the docs', the demo's
