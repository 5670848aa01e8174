"""The architecture stays visible: leader and follower never import each other; common imports nothing of ours."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
OURS = {"common", "leader", "follower", "protos", "benchfleet"}
ALLOWED = {
    "common": set(),
    "protos": set(),
    "leader": {"common", "protos"},
    "follower": {"common", "protos"},
}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found & OURS


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_package_imports_only_what_it_may(package: str) -> None:
    files = sorted((ROOT / package).rglob("*.py"))
    assert files, f"{package}/ has no Python files"
    offenders = {
        str(path.relative_to(ROOT)): sorted(bad)
        for path in files
        if (bad := _imports(path) - ALLOWED[package] - {package})
    }
    assert offenders == {}, f"{package} imports what it must not: {offenders}"
