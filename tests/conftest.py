"""Shared fixtures: real Redis and a real MongoDB-protocol server (SecantusDB), started once per session."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from benchfleet.stack import LocalStack, port_open
from tests import skip_budget

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "artifacts"


def wait_for_port(port: int, timeout: float = 30.0, host: str = "127.0.0.1") -> None:
    """Poll until something accepts on host:port (a server a test started)."""
    deadline = time.monotonic() + timeout
    while not port_open(port, host):
        if time.monotonic() > deadline:
            raise TimeoutError(f"nothing listened on port {port} within {timeout}s")
        time.sleep(0.05)


@dataclass(frozen=True)
class Service:
    """A started server and where to reach it."""

    url: str


@pytest.fixture(scope="session")
def artifacts_dir() -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS


@pytest.fixture(scope="session")
def redis_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    """A real redis-server on loopback (Debian's binary)."""
    with LocalStack(tmp_path_factory.mktemp("redis")) as stack:
        yield Service(stack.start_redis())


@pytest.fixture(scope="session")
def mongo_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    """A real MongoDB wire-protocol server: SecantusDB run as a separate process (it is GPL; never imported)."""
    with LocalStack(tmp_path_factory.mktemp("mongo")) as stack:
        yield Service(stack.start_mongo())


# Two workers run the suite (scripts/test.sh: pytest-xdist): a module runs whole on one worker, so its module-scoped
# fleet, leader app or browser is started once. Modules that bind the README's fixed ports (8700, 8701) or share the
# one Kubernetes cluster and podman store run in one group, one after another, on one worker.
FIXED_PORTS = "readme-ports"
FIXED_PORT_MODULES = ("tests/deploy/", "tests/e2e/test_newcomer.py")
# The longest modules are handed out first, so neither worker is left with a long one at the end (measured in
# docs/tests/durations_*.log); the rest keep their collection order.
LONGEST_FIRST = (
    "tests/e2e/test_llm_jobs.py",
    FIXED_PORTS,
    "tests/e2e/test_demo.py",
    "tests/e2e/test_openapi_fuzz.py",
    "tests/e2e/test_cli_operate.py",
    "tests/faults/test_faults.py",
    "tests/e2e/test_fleet.py",
)


def group_of(nodeid: str) -> str:
    """The worker group of a test: its module, or the fixed-ports group."""
    module = nodeid.split("::", 1)[0]
    return FIXED_PORTS if module.startswith(FIXED_PORT_MODULES) else module


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    rank = {group: i for i, group in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(group_of(item.nodeid), len(rank)))  # stable: modules stay whole and in order


class Groups:
    """xdist's scheduler by group: its own `--dist loadgroup` marks node ids in a way pytest 9.2 no longer reads."""

    @staticmethod
    def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
        from xdist.scheduler import LoadScopeScheduling

        class ByGroup(LoadScopeScheduling):
            def _split_scope(self, nodeid: str) -> str:
                return group_of(nodeid)

        return ByGroup(config, log)


def pytest_configure(config: pytest.Config) -> None:
    if config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(Groups(), "benchfleet-groups")
    config.pluginmanager.register(skip_budget, "skip-budget")
    config.stash[TRACKED] = tracked_changes()


def tracked_changes() -> str | None:
    """`git status` of the tracked files (None outside a git checkout): a test run must leave it as it found it."""
    try:
        done = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout


TRACKED = pytest.StashKey[str | None]()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Write the fault table from the faults and bad inputs the tests recorded (never by hand): artifacts/faults.md,
    or docs/faults.md with BENCHFLEET_WRITE_FAULTS=1 (tests/faults/outcomes.py). Then, under the skip budget's
    enforcement (CI), a run that changed a tracked file fails, naming it."""
    from tests.faults.outcomes import write_table

    write_table()  # each worker its own rows, merged under a lock
    if hasattr(session.config, "workerinput"):
        return  # a worker: the controller judges the whole run
    before, after = session.config.stash.get(TRACKED, None), tracked_changes()
    if skip_budget.enforced() and before is not None and after is not None and after != before:
        changed = sorted(set(after.splitlines()) - set(before.splitlines()))
        session.config.stash[CHANGED] = changed
        if session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED


CHANGED = pytest.StashKey[list[str]]()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    changed = terminalreporter.config.stash.get(CHANGED, [])
    if changed:
        terminalreporter.section("tracked files changed by the run")
        for line in changed:
            terminalreporter.write_line(f"THE RUN CHANGED A TRACKED FILE (fails the run): {line}", red=True)
