"""SupervisedProcess: readiness, timeouts and stop leave no process behind (checked with psutil)."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import psutil
import pytest

from common.procs import SupervisedProcess, free_port, http_ready

pytestmark = pytest.mark.integration

# A parent that spawns a child and then ignores SIGTERM: the worst case for "no orphans".
STUBBORN = """
import signal, subprocess, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
print("child", child.pid, flush=True)
time.sleep(600)
"""


def _group(pid: int) -> list[psutil.Process]:
    """Live processes (not zombies) of the process group `pid`."""
    out = []
    for proc in psutil.process_iter(["pid"]):
        try:
            if os.getpgid(proc.pid) == pid and proc.status() != psutil.STATUS_ZOMBIE:
                out.append(proc)
        except (ProcessLookupError, psutil.Error):
            continue
    return out


def test_readiness_timeout_kills_the_whole_group(tmp_path: Path) -> None:
    proc = SupervisedProcess([sys.executable, "-c", STUBBORN], name="stubborn", log_path=tmp_path / "s.log", grace_s=1.0)
    proc.start()
    assert proc.pid is not None and proc.started_at_ns is not None
    deadline = time.monotonic() + 10
    while "child" not in proc.log_tail() and time.monotonic() < deadline:
        time.sleep(0.05)
    child_pid = int(proc.log_tail().split()[1])
    assert len(_group(proc.pid)) == 2
    with pytest.raises(TimeoutError, match="not ready within 0.3s") as info:
        # Readiness can never come; wait_ready must stop the process itself (SIGTERM ignored → SIGKILL after grace).
        proc.wait_ready(lambda: False, timeout_s=0.3)
    assert "child" in str(info.value)  # the log tail is in the message
    assert not proc.alive()
    assert not psutil.pid_exists(child_pid) or psutil.Process(child_pid).status() == psutil.STATUS_ZOMBIE
    assert _group(proc.pid) == []


def test_early_exit_raises_with_log_tail(tmp_path: Path) -> None:
    argv = [sys.executable, "-c", "import sys; print('bad model file'); sys.exit(3)"]
    with SupervisedProcess(argv, name="crasher", log_path=tmp_path / "c.log") as proc:
        with pytest.raises(RuntimeError, match="exited with code 3") as info:
            proc.wait_ready(lambda: False, timeout_s=10)
        assert "bad model file" in str(info.value)


def test_ready_server_then_stop_is_clean_and_idempotent(tmp_path: Path) -> None:
    port = free_port()
    argv = [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"]
    with SupervisedProcess(argv, name="http", log_path=tmp_path / "h.log", cwd=tmp_path) as proc:
        seconds = proc.wait_ready(http_ready(f"http://127.0.0.1:{port}/"), timeout_s=15)
        assert 0 < seconds < 15
        assert proc.alive()
        pid = proc.pid
        assert pid is not None
        code = proc.stop(grace_s=5)
        assert code is not None
        assert proc.stop() == code  # idempotent
    assert not proc.alive()
    assert _group(pid) == []
    assert not http_ready(f"http://127.0.0.1:{port}/")()


def test_free_port_never_repeats_a_recent_port() -> None:
    # Callers take several ports (HTTP, gRPC, metrics) before binding any: the kernel may offer one twice.
    ports = [free_port() for _ in range(200)]
    assert len(set(ports)) == len(ports)
