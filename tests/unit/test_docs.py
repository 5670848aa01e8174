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
