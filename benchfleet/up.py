"""`benchfleet up` / `down`: a local fleet that stays up after the command returns.

`up` starts a detached supervisor (`python -m benchfleet.up WORKDIR`, its own session, so closing the terminal does
not stop it). The supervisor runs a `LocalStack` (the embedded database, Redis, a leader and one follower) until it
gets SIGTERM, then stops them all. Once the leader answers, it writes `WORKDIR/fleet.json` (owner-only): the URL
and its own pid. `up` waits for that file and prints how to use the fleet. `down` sends SIGTERM to
the supervisor and waits until it and its processes are gone. The database keeps its data under WORKDIR between
runs, and so does the admin token (WORKDIR/admin-token, owner-only).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import psutil

from benchfleet.stack import LocalStack, port_open

STATE = "fleet.json"
TOKEN = "admin-token"
SECRET_KEY = "secret-key"
FOLLOWER_ID = "local"
DEFAULT_PORT = 8700
START_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 60.0


def _private_write(path: Path, text: str) -> None:
    """Write a file only its owner can read (it holds a token)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        os.fchmod(out.fileno(), 0o600)
        out.write(text)


def admin_token(workdir: Path) -> str:
    """The fleet's admin token, made once and kept (so a token handed out survives `down` and `up`)."""
    return _kept(workdir / TOKEN, 24)


def secret_key(workdir: Path) -> str:
    """The key target secrets are sealed with, made once and kept (a stored secret opens after `down` and `up`)."""
    return _kept(workdir / SECRET_KEY, 32)


def _kept(path: Path, nbytes: int) -> str:
    if path.is_file():
        return path.read_text().strip()
    value = secrets.token_urlsafe(nbytes)
    _private_write(path, value)
    return value


def _alive(pid: int) -> bool:
    """Whether the process runs (a zombie waiting for its parent to reap it has stopped)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def read_state(workdir: Path) -> dict[str, Any] | None:
    """The running fleet's state (url, pid), or None when no supervisor of it is alive."""
    try:
        state: dict[str, Any] = json.loads((workdir / STATE).read_text())
        pid = int(state["pid"])
    except (OSError, ValueError, KeyError):
        return None
    return state if _alive(pid) else None


def serve(workdir: Path, port: int) -> int:
    """The supervisor: start the stack, publish its state, hold it until SIGTERM or SIGINT, stop it; the exit code."""
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    token = admin_token(workdir)
    stack = LocalStack(workdir, leader_port=port, admin_token=token, secret_key=secret_key(workdir))
    with stack:
        try:
            stack.start_mongo()
            stack.start_redis(durable=True)
            stack.start_leader()
            stack.start_follower(FOLLOWER_ID)
        except (RuntimeError, TimeoutError) as exc:
            print(f"benchfleet up: {exc}", file=sys.stderr, flush=True)
            return 1
        _private_write(workdir / STATE, json.dumps({"url": stack.url, "pid": os.getpid()}))
        print(f"benchfleet up: leader on {stack.url}, follower {FOLLOWER_ID!r}", flush=True)
        while not stop.wait(1.0):
            if gone := [name for name, p in stack.procs.items() if not p.alive()]:
                print(f"benchfleet up: {', '.join(gone)} exited; stopping the fleet", file=sys.stderr, flush=True)
                break
    with contextlib.suppress(FileNotFoundError):
        (workdir / STATE).unlink()
    return 0


class PortTaken(RuntimeError):
    """The leader's port is someone else's: the user's choice to change, not a fleet that failed."""


def up(workdir: Path, port: int = DEFAULT_PORT) -> dict[str, Any]:
    """Start the supervisor detached (or find it running) and wait for its state; RuntimeError with its log if not."""
    workdir.mkdir(parents=True, exist_ok=True)
    if (state := read_state(workdir)) is not None:
        return state
    if port_open(port):
        raise PortTaken(f"--port {port} is taken (something else listens on it): pass another --port")
    log = workdir / "up.log"
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "benchfleet.up", str(workdir), str(port)],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if (state := read_state(workdir)) is not None:
            return state
        if proc.poll() is not None:
            break
        time.sleep(0.2)
    if proc.poll() is None:
        proc.terminate()
    raise RuntimeError(f"the fleet did not start; its log ({log}) ends:\n" + "\n".join(log.read_text().splitlines()[-15:]))


def down(workdir: Path) -> bool:
    """Stop the fleet's supervisor (it stops its processes) and wait until it is gone; False if none was running."""
    state = read_state(workdir)
    if state is None:
        return False
    pid = int(state["pid"])
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        time.sleep(0.2)
    raise RuntimeError(f"the fleet's supervisor (pid {pid}) did not stop within {STOP_TIMEOUT_S:.0f} s")


if __name__ == "__main__":
    sys.exit(serve(Path(sys.argv[1]), int(sys.argv[2])))
