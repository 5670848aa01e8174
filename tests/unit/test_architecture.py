"""The architecture stays visible: packages and folders import only downward, nothing imports in a circle, and no
module grows past what a reader takes in at once."""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path
from typing import get_args

import pytest

from common.spec.target import ProtocolName

ROOT = Path(__file__).resolve().parents[2]
OURS = {"common", "leader", "follower", "protos", "benchfleet"}
ALLOWED = {
    "common": set(),
    "protos": set(),
    "leader": {"common", "protos"},
    "follower": {"common", "protos"},
    # The client, the CLI and the local stack: they start a leader or a follower as entry points, and generate
    # canonical models with the follower's converters, only inside the commands that do so (see below).
    "benchfleet": {"common", "protos", "leader", "follower"},
}
# What a package may import at the top of its modules, where that is less than what it may import at all.
AT_TOP = {"benchfleet": {"common", "protos"}}
MAX_LINES = 450
# Folders of the follower in the order a job travels, each importing only its own rank and below: the agent takes a
# job, an attempt runs it, a point is measured by the load generator against a backend's server; below them the
# protocols (each one's URLs, readiness, metadata, bodies and transport); the host's facts and the links to the outside
# serve all of them.
FOLLOWER_RANKS = {
    "agent": 6,
    "attempt": 5,
    "point": 4,
    "loadgen": 3,
    "backends": 3,
    "servers": 3,
    "convert": 3,
    "protocols": 2,
    "host": 1,
    "link": 1,
    "settings": 0,
}
# Where a protocol may be named: its own room, the spec that declares the names, and the backends, each of which
# declares the protocol it serves. Anywhere else, a protocol's behaviour is asked of its module, never branched on.
PROTOCOL_NAMES = frozenset(get_args(ProtocolName))  # the spec's one list of them
PROTOCOL_HOMES = ("follower/protocols/", "follower/backends/", "common/spec/target.py")
# The rooms of common/, each importing only its own rank and below: the base (the strict model, name patterns) and
# the plain utilities; the job-spec language; the wire contracts that carry specs; the upload formats and the maths
# that read contracts.
COMMON_RANKS = {
    "base": 0,
    "fairshare": 0,
    "errors": 0,
    "devices": 0,
    "logs": 0,
    "procs": 0,
    "egress": 0,  # where a target may point
    "tensors": 0,  # the size of one request
    "tracing": 1,
    "spec": 1,
    "wire": 2,
    "formats": 3,
    "stats": 3,
}
# Leader folders that must not import each other's modules: the API and the pages are peers over analysis; the
# stores know nothing above them; placement (every way a job gets a follower) knows the stores only; the jobs room
# (limits, target checks, fleet checks) makes jobs on top of placement and the stores; analysis reads and draws nothing.
LEADER_NEVER = {
    "leader.api": {"leader.web"},
    "leader.web": {"leader.api.routes"},
    "leader.analysis": {"leader.api", "leader.web", "leader.jobs", "leader.placement"},
    "leader.store": {"leader.api", "leader.web", "leader.analysis", "leader.jobs", "leader.placement"},
    "leader.placement": {"leader.api", "leader.web", "leader.analysis", "leader.jobs"},
    "leader.jobs": {"leader.api", "leader.web"},
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


def _top_level_imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found & OURS


@pytest.mark.parametrize("package", sorted(AT_TOP))
def test_package_imports_services_only_inside_its_commands(package: str) -> None:
    offenders = {
        str(path.relative_to(ROOT)): sorted(bad)
        for path in sorted((ROOT / package).rglob("*.py"))
        if (bad := _top_level_imports(path) - AT_TOP[package] - {package})
    }
    assert offenders == {}, f"{package} imports at the top what only its commands may: {offenders}"


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


def _upward_imports(package: str, ranks: dict[str, int]) -> list[str]:
    def rank(module: str) -> int | None:
        parts = module.split(".")
        return ranks.get(parts[1]) if len(parts) > 1 and parts[0] == package else None

    offenders = []
    for name, path in _modules().items():
        mine = rank(name)
        if mine is None:
            continue
        for other in _imported(path):
            theirs = rank(other)
            if theirs is not None and theirs > mine:
                offenders.append(f"{name} ({mine}) imports {other} ({theirs})")
    return offenders


def test_follower_folders_import_only_down_the_path() -> None:
    offenders = _upward_imports("follower", FOLLOWER_RANKS)
    assert offenders == [], "follower folders importing up the path:\n" + "\n".join(offenders)


def test_common_rooms_import_only_down_their_ranks() -> None:
    rooms = {p.stem for p in (ROOT / "common").iterdir() if p.suffix == ".py" or (p / "__init__.py").exists()}
    assert rooms - {"__init__"} == set(COMMON_RANKS), "every room of common/ has a rank (and every ranked room exists)"
    offenders = _upward_imports("common", COMMON_RANKS)
    assert offenders == [], "common/ rooms importing up their ranks:\n" + "\n".join(offenders)


def test_leader_folders_keep_to_their_side() -> None:
    offenders = []
    for name, path in _modules().items():
        for folder, never in LEADER_NEVER.items():
            if name == folder or name.startswith(folder + "."):
                imported = _imported(path)
                offenders += [f"{name} imports {m}" for m in imported for bad in never if m == bad or m.startswith(bad + ".")]
    assert offenders == [], "\n".join(offenders)


def _readable() -> list[Path]:
    """The packages' modules and the benchmarks: what the length and layout rules hold for."""
    return _sources() + sorted((ROOT / "bench").glob("*.py"))


def test_no_module_is_longer_than_a_reader_takes_in() -> None:
    long = {str(p.relative_to(ROOT)): n for p in _readable() if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert long == {}, f"modules over {MAX_LINES} lines (split them by what they do): {long}"


def test_no_lines_are_packed_past_the_formatter() -> None:
    """The formatter lays every line out (tests/unit/test_typecheck.py checks it); a module that would need packing to
    stay under the length cap is a module to split, not to exempt."""
    packed = [
        f"{p.relative_to(ROOT)}:{n}"
        for p in _readable()
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if "fmt: skip" in line or "fmt: off" in line
    ]
    assert packed == [], f"lines kept from the formatter: {packed[:20]}"


def _names_a_protocol(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant):
        return node.value in PROTOCOL_NAMES
    return isinstance(node, ast.Tuple | ast.List | ast.Set) and any(_names_a_protocol(e) for e in node.elts)


def test_protocols_are_named_only_in_their_room_and_never_sniffed_from_urls() -> None:
    named, branched, sniffed = [], [], []
    for path in _sources():
        where = str(path.relative_to(ROOT))
        source = path.read_text()
        if "?api=" in source:
            sniffed.append(where)
        if where.startswith(PROTOCOL_HOMES):
            continue
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Compare) and any(_names_a_protocol(n) for n in [node.left, *node.comparators]):
                branched.append(f"{where}:{node.lineno}")
            elif isinstance(node, ast.Constant) and node.value in PROTOCOL_NAMES:
                named.append(f"{where}:{node.lineno}")
    assert branched == [], f"a branch on a protocol outside follower/protocols/ (ask its module instead): {branched}"
    assert named == [], f"a protocol named outside its room, the spec and the backends: {named}"
    assert sniffed == [], f"a protocol encoded into a URL's query: {sniffed}"


def test_every_protocol_is_one_module_of_its_room() -> None:
    room = ROOT / "follower" / "protocols"
    modules = {p.stem.replace("_", "-") for p in room.glob("*.py")} - {"--init--", "base", "calls"}
    assert modules == set(PROTOCOL_NAMES), "one module per protocol in follower/protocols/"


# The pure decisions of the leader: what a job's transitions do (the lifecycle) and where a job goes (the domain
# values and the placer's book). None of them reads a database, the clock or the network: their cases are unit tests.
PURE_LEADER = ("leader.lifecycle", "leader.domain", "leader.placement.book")
IMPURE = ("pymongo", "motor", "redis", "celery", "gridfs", "httpx", "aiohttp", "leader.store", "leader.clock")


def _every_import(path: Path) -> set[str]:
    """Every module a file names in an import, ours or not, at the top or inside a function."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found |= {node.module, *(f"{node.module}.{alias.name}" for alias in node.names)}
    return found


@pytest.mark.parametrize("module", PURE_LEADER)
def test_the_leader_s_pure_modules_import_no_database_clock_or_network(module: str) -> None:
    path = _modules()[module]
    bad = sorted(name for name in _every_import(path) if any(name == i or name.startswith(i + ".") for i in IMPURE))
    assert bad == [], f"{module} imports {bad}"
