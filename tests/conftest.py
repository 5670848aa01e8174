"""Shared fixtures: real Redis and a real MongoDB-protocol server (SecantusDB), started once per session."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "artifacts"


def free_port() -> int:
    """A currently free loopback TCP port."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for_port(port: int, proc: subprocess.Popen[bytes] | None = None, timeout: float = 30.0) -> None:
    """Poll until something accepts on 127.0.0.1:port, failing fast if the process died."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode} before listening on {port}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"nothing listened on port {port} within {timeout}s")


def stop_process(proc: subprocess.Popen[bytes], timeout: float = 10.0) -> None:
    """SIGTERM, wait, then SIGKILL: no process outlives its fixture."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class Service:
    """A started server process and where to reach it."""

    def __init__(self, proc: subprocess.Popen[bytes], url: str, port: int, log: Path) -> None:
        self.proc, self.url, self.port, self.log = proc, url, port, log


@pytest.fixture(scope="session")
def artifacts_dir() -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS


@pytest.fixture(scope="session")
def redis_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    """A real redis-server on loopback (Debian's binary)."""
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.fail("redis-server is not installed: run scripts/test.sh, which installs it")
    port = free_port()
    workdir = tmp_path_factory.mktemp("redis")
    log = workdir / "redis.log"
    proc = subprocess.Popen(
        [binary, "--bind", "127.0.0.1", "--port", str(port), "--save", "", "--appendonly", "no", "--dir", str(workdir)],
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
    )
    try:
        wait_for_port(port, proc)
        yield Service(proc, f"redis://127.0.0.1:{port}/0", port, log)
    finally:
        stop_process(proc)


@pytest.fixture(scope="session")
def mongo_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    """A real MongoDB wire-protocol server: SecantusDB run as a separate process (it is GPL; never imported)."""
    binary = shutil.which("secantusd-py") or str(Path(sys.executable).parent / "secantusd-py")
    if not os.path.exists(binary):
        pytest.fail("secantusd-py is not installed: run scripts/test.sh, which installs it")
    port = free_port()
    workdir = tmp_path_factory.mktemp("mongo")
    log = workdir / "secantus.log"
    proc = subprocess.Popen(
        [binary, "--host", "127.0.0.1", "--port", str(port), "--storage-path", str(workdir / "data"), "--standalone"],
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
    )
    try:
        wait_for_port(port, proc, timeout=60)
        yield Service(proc, f"mongodb://127.0.0.1:{port}/?directConnection=true&retryWrites=false", port, log)
    finally:
        stop_process(proc)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Write docs/faults.md from the faults and bad inputs the tests recorded (never by hand)."""
    from tests.faults.outcomes import write_table

    write_table()
