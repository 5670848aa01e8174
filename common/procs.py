"""Supervised subprocesses: bounded start, bounded readiness polling, group kill, log kept; no orphans."""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import functools
import os
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import IO

# Started and not yet stopped; stopped at interpreter exit so that even a crashed caller leaves no orphans.
_LIVE: set[SupervisedProcess] = set()  # strong refs: a forgotten, unstopped process is still stopped at exit


@atexit.register
def _stop_all_at_exit() -> None:
    for proc in list(_LIVE):
        proc.stop(grace_s=2.0)


# Ports handed out recently by free_port(): callers often take several (HTTP, gRPC, metrics) before the server binds
# any of them, and the kernel may offer the same free port twice in a row (seen: Triton refusing to start because its
# gRPC and metrics ports were equal).
_ISSUED: deque[int] = deque(maxlen=512)
_ISSUED_LOCK = threading.Lock()


def free_port() -> int:
    """A currently free TCP port on 127.0.0.1 that this process has not handed out recently."""
    for _ in range(100):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        with _ISSUED_LOCK:
            if port not in _ISSUED:
                _ISSUED.append(port)
                return port
    raise RuntimeError("no free loopback port found that was not handed out recently")


def http_ready(url: str, timeout_s: float = 0.5) -> Callable[[], bool]:
    """A readiness check: True when a GET on `url` answers 200 within `timeout_s`."""

    def check() -> bool:
        try:
            with urllib.request.urlopen(url, timeout=timeout_s) as response:  # noqa: S310 - loopback URLs we built
                return bool(response.status == 200)
        except (urllib.error.URLError, OSError, ValueError):
            # Connection refused / reset / HTTP 503 while loading: simply "not ready yet".
            return False

    return check


class SupervisedProcess:
    """A child process in its own session, so that stop() kills it and everything it spawned."""

    def __init__(
        self,
        argv: Sequence[str],
        *,
        name: str,
        log_path: Path,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        grace_s: float = 10.0,
    ) -> None:
        self.argv = [str(a) for a in argv]
        self.name = name
        self.log_path = Path(log_path)
        self.env = dict(env) if env is not None else None
        self.cwd = cwd
        self.grace_s = grace_s  # SIGTERM→SIGKILL grace when stop() is not given one (also on readiness failure)
        self.started_at_ns: int | None = None
        self.returncode: int | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    # -- lifecycle ---------------------------------------------------------------------------------------------

    def start(self) -> SupervisedProcess:
        """Spawn the process with stdout and stderr appended to the log file."""
        if self._proc is not None:
            raise RuntimeError(f"{self.name}: already started")
        become_subreaper()
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = self.log_path.open("ab")
        self.started_at_ns = time.monotonic_ns()
        try:
            self._proc = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=self._log,
                stderr=subprocess.STDOUT,
                env=self.env,
                cwd=self.cwd,
                # A new session makes the child a process-group leader: killpg reaches its workers too.
                start_new_session=True,
            )
        except OSError:
            self._log.close()
            self._log = None
            raise
        _LIVE.add(self)
        return self

    @property
    def pid(self) -> int | None:
        """The child's pid (also its process-group id), or None before start()."""
        return self._proc.pid if self._proc is not None else None

    def alive(self) -> bool:
        """Whether the child is running now."""
        return self._proc is not None and self._proc.poll() is None

    def wait_ready(self, check: Callable[[], bool], timeout_s: float, interval_s: float = 0.05) -> float:
        """Poll `check` until it is True; return seconds since spawn. On exit or timeout, stop and raise with the log tail."""
        if self._proc is None or self.started_at_ns is None:
            raise RuntimeError(f"{self.name}: wait_ready() before start()")
        deadline = time.monotonic() + timeout_s
        while True:
            code = self._proc.poll()
            if code is not None:
                self.stop()
                raise RuntimeError(f"{self.name} exited with code {code} before it was ready; log tail:\n{self.log_tail()}")
            if check():
                return (time.monotonic_ns() - self.started_at_ns) / 1e9
            if time.monotonic() >= deadline:
                self.stop()
                raise TimeoutError(
                    f"{self.name} was not ready within {timeout_s:g}s and was killed; log tail:\n{self.log_tail()}"
                )
            time.sleep(interval_s)

    def stop(self, grace_s: float | None = None) -> int | None:
        """SIGTERM the process group, wait up to `grace_s` (default: the constructor's), then SIGKILL it; idempotent."""
        proc = self._proc
        if proc is None:
            return None
        if self.returncode is None:
            if proc.poll() is None:
                self._signal_group(signal.SIGTERM)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=self.grace_s if grace_s is None else grace_s)
            # Even when the leader exited on SIGTERM, a grandchild may linger in the group: kill what is left.
            self._signal_group(signal.SIGKILL)
            # A process can outlive SIGKILL only while stuck in the kernel (D state); don't hang on it forever.
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5.0)
            # SIGKILL is delivered asynchronously: wait until no live member of the group remains, so "stopped"
            # means gone (zombies awaiting their reaper count as gone).
            _wait_group_gone(proc.pid, timeout_s=5.0)
            self.returncode = proc.returncode
        _LIVE.discard(self)
        if self._log is not None:
            self._log.close()
            self._log = None
        return self.returncode

    def _signal_group(self, sig: signal.Signals) -> None:
        assert self._proc is not None
        # The group may be gone already (PermissionError: macOS reports a reaped group this way).
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self._proc.pid, sig)

    # -- logs --------------------------------------------------------------------------------------------------

    def log_tail(self, n_lines: int = 40) -> str:
        """The last `n_lines` lines of the log, decoded leniently."""
        try:
            with self.log_path.open("rb") as fh:
                fh.seek(0, os.SEEK_END)
                size = fh.tell()
                # Logs can be large; 64 KiB is plenty for a tail of a few dozen lines.
                fh.seek(max(0, size - 65536))
                data = fh.read()
        except OSError:
            return ""
        lines = data.decode("utf-8", errors="replace").splitlines()
        return "\n".join(lines[-n_lines:])

    # -- context manager ---------------------------------------------------------------------------------------

    def __enter__(self) -> SupervisedProcess:
        if self._proc is None:
            self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"SupervisedProcess(name={self.name!r}, pid={self.pid}, alive={self.alive()})"


def _wait_group_gone(pgid: int, timeout_s: float) -> None:
    """Poll until every process of the group is dead or a zombie, then until the zombies that become ours are reaped
    too (a sandbox's init is reparented to us only once its parent is gone): at most timeout_s in all."""
    import psutil

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        _reap_group(pgid)
        alive = []
        for p in psutil.process_iter(["pid", "status"]):
            # A process may be gone (reaped) between the listing and the question: that is not a failure to stop.
            with contextlib.suppress(psutil.Error, OSError):
                if os.getpgid(p.info["pid"]) == pgid and p.info["status"] != psutil.STATUS_ZOMBIE:
                    alive.append(p.info["pid"])
        if not alive:
            break
        time.sleep(0.01)
    # Zombies left in the group: ours to reap once reparented to this subreaper (others' parents reap their own).
    reap_until = min(deadline, time.monotonic() + 1.0)
    while time.monotonic() < reap_until:
        _reap_group(pgid)
        try:
            os.killpg(pgid, 0)
        except (ProcessLookupError, PermissionError):
            return
        time.sleep(0.01)


def _reap_group(pgid: int) -> None:
    """Collect the exit status of every dead child of ours in the group (orphans reparented to us included)."""
    while True:
        try:
            if os.waitid(os.P_PGID, pgid, os.WEXITED | os.WNOHANG) is None:
                return
        except ChildProcessError:
            return


@functools.cache
def become_subreaper() -> bool:
    """Adopt this process's orphaned descendants (Linux PR_SET_CHILD_SUBREAPER), so that stop() can reap them.

    A sandboxed server runs under bubblewrap's own init; when the group is killed, that init may outlive its parent
    for a moment and would otherwise end as a zombie of the host's init, keeping the group alive.
    """
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(36, 1, 0, 0, 0) == 0)  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        return False
