"""The architecture stays visible: packages and folders import only downward, nothing imports in a circle, and no
module grows past what a reader takes in at once."""

from __future__ import annotations

import ast
from functools import cache
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
MAX_LINES = 450
# Folders of the follower in the order a job travels, each importing only its own rank and below: the agent takes a
# job, an attempt runs it, a point is measured by the load generator against a backend's server; the host's facts
# and the links to the outside serve all of them.
FOLLOWER_RANKS = {
    "agent": 5,
    "attempt": 4,
    "point": 3,
    "loadgen": 2, "backends": 2, "servers": 2, "convert": 2,
    "host": 1, "link": 1,
    "settings": 0,
}  # fmt: skip
# Leader folders that must not import each other's modules: the API and the pages are peers over analysis; the
# stores and the scheduler know neither; analysis computes data and draws nothing.
LEADER_NEVER = {
    "leader.api": {"leader.web"},
    "leader.web": {"leader.api.routes"},
    "leader.analysis": {"leader.api", "leader.web"},
    "leader.store": {"leader.api", "leader.web", "leader.analysis", "leader.scheduler"},
    "leader.scheduler": {"leader.api", "leader.web", "leader.analysis"},
}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@cache
def _modules() -> dict[str, Path]:
    return {_module_name(p): p for package in sorted(OURS) for p in (ROOT / package).rglob("*.py")}


@cache
def _imported(path: Path) -> frozenset[str]:
    """Every module of ours a file imports, at the top or inside a function, resolved to a module that exists."""
    modules = _modules()
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            # `from a.b import c` is module a.b.c when c is a module, else a name in a.b.
            names = [f"{node.module}.{alias.name}" for alias in node.names] + [node.module]
        for name in names:
            while name and name not in modules:
                name = name.rpartition(".")[0]
            if name:
                found.add(name)
    return frozenset(found - {_module_name(path)})


def _sources() -> list[Path]:
    return [p for p in _modules().values() if p.parts[len(ROOT.parts)] != "protos"]


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_package_imports_only_what_it_may(package: str) -> None:
    files = sorted((ROOT / package).rglob("*.py"))
    assert files, f"{package}/ has no Python files"
    offenders = {
        str(path.relative_to(ROOT)): sorted(bad)
        for path in files
        if (bad := {m.split(".")[0] for m in _imported(path)} - ALLOWED[package] - {package})
    }
    assert offenders == {}, f"{package} imports what it must not: {offenders}"


def test_no_module_imports_itself_round_a_loop() -> None:
    graph = {name: {m for m in _imported(path) if m != name} for name, path in _modules().items()}
    circles: list[list[str]] = []
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                circles.append(path[path.index(nxt) :] + [nxt])
            elif nxt not in state:
                visit(nxt)
        path.pop()
        state[node] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name)
    def exposes(a: str, b: str) -> bool:
        # A package's __init__ importing its own modules is how a package exposes them, not a circle between files.
        return a.startswith(b + ".") or b.startswith(a + ".")

    circles = [c for c in circles if not any(exposes(a, b) for a, b in zip(c, c[1:], strict=False))]
    assert circles == [], "import circles:\n" + "\n".join(" -> ".join(c) for c in circles)


def test_follower_folders_import_only_down_the_path() -> None:
    def rank(module: str) -> int | None:
        parts = module.split(".")
        return FOLLOWER_RANKS.get(parts[1]) if len(parts) > 1 and parts[0] == "follower" else None

    offenders = []
    for name, path in _modules().items():
        mine = rank(name)
        if mine is None:
            continue
        for other in _imported(path):
            theirs = rank(other)
            if theirs is not None and theirs > mine:
                offenders.append(f"{name} ({mine}) imports {other} ({theirs})")
    assert offenders == [], "follower folders importing up the path:\n" + "\n".join(offenders)


def test_leader_folders_keep_to_their_side() -> None:
    offenders = []
    for name, path in _modules().items():
        for folder, never in LEADER_NEVER.items():
            if name == folder or name.startswith(folder + "."):
                imported = _imported(path)
                offenders += [f"{name} imports {m}" for m in imported for bad in never if m == bad or m.startswith(bad + ".")]
    assert offenders == [], "\n".join(offenders)


def test_no_module_is_longer_than_a_reader_takes_in() -> None:
    long = {str(p.relative_to(ROOT)): n for p in _sources() if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert long == {}, f"modules over {MAX_LINES} lines (split them by what they do): {long}"
