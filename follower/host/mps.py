"""NVIDIA's Multi-Process Service for a co-location job's GPU servers: one control daemon per job, started and stopped
by the follower, so that several servers share the GPU's SMs concurrently instead of time-slicing it.

Each server joins through the daemon's pipe directory (CUDA_MPS_PIPE_DIRECTORY) and may be held to a share of the
GPU's threads (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE). The servers run as `nobody` in their sandboxes: the pipe and log
directories are world-writable and bound into each sandbox (a sandbox's own /dev/shm and IPC namespace do not stop
MPS: seen on an H100 with driver 580). Needs `nvidia-cuda-mps-control` (the NVIDIA driver's
utilities) and a GPU; `available()` says why not.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
import tempfile
from pathlib import Path

from follower.host.sandbox import server_environment

log = logging.getLogger(__name__)

CONTROL = "nvidia-cuda-mps-control"


def available() -> tuple[bool, str]:
    """Whether the MPS control daemon can be started here, and why not."""
    if shutil.which(CONTROL) is None:
        return False, f"{CONTROL} is not installed (the NVIDIA driver's utilities)"
    if not list(Path("/dev").glob("nvidia[0-9]*")):
        return False, "no NVIDIA GPU device on this host"
    return True, "MPS control daemon available"


class MpsDaemon:
    """One job's MPS control daemon; a context manager that starts it and always asks it to quit.

    Its pipe and log directories live in a directory of their own under the system's temporary directory, not in the
    job's work directory: the MPS server the daemon starts runs on the host as the servers' user (nobody), outside
    their sandboxes, and must reach the pipe directory through every parent (under a work directory with a root-only
    parent every client failed with CUDA error 805, seen on an H100); the path stays short too, as the sockets bound in
    it must. When the daemon quits, its logs are kept in the work directory (mps-log) and its own directory removed."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = Path(workdir)
        self.home: Path | None = None

    def _home(self) -> Path:
        if self.home is None:
            raise RuntimeError("the MPS daemon has not been started")
        return self.home

    @property
    def pipe_dir(self) -> Path:
        """Where the daemon listens and its clients connect (CUDA_MPS_PIPE_DIRECTORY)."""
        return self._home() / "pipe"

    @property
    def log_dir(self) -> Path:
        """Where the daemon and its MPS server write their logs (CUDA_MPS_LOG_DIRECTORY)."""
        return self._home() / "log"

    @property
    def dirs(self) -> list[Path]:
        """The directories a server must see, writable."""
        return [self.pipe_dir, self.log_dir]

    def _env(self) -> dict[str, str]:
        return {"CUDA_MPS_PIPE_DIRECTORY": str(self.pipe_dir), "CUDA_MPS_LOG_DIRECTORY": str(self.log_dir)}

    def client_env(self, active_thread_percentage: int | None) -> dict[str, str]:
        """A server's environment additions: the daemon's directories and its share of the GPU's threads."""
        share = {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": str(active_thread_percentage)} if active_thread_percentage else {}
        return {**self._env(), **share}

    def start(self) -> None:
        ok, why = available()
        if not ok:
            raise RuntimeError(f"MPS cannot run here: {why}")
        self.home = Path(tempfile.mkdtemp(prefix="benchfleet-mps-"))
        self.home.chmod(0o755)
        for path in self.dirs:
            path.mkdir()
            path.chmod(0o1777)  # the servers, and the MPS server started for them, run as nobody
        try:
            subprocess.run([CONTROL, "-d"], env=server_environment(self._env()), check=True, timeout=30, capture_output=True)
        except (OSError, subprocess.SubprocessError):
            shutil.rmtree(self.home, ignore_errors=True)
            self.home = None
            raise
        log.info("MPS control daemon started (pipe %s)", self.pipe_dir)

    def stop(self) -> None:
        """Ask the daemon to quit (it stops its server once every client has gone), keep its logs in the work
        directory and remove its own directory; never raises."""
        if self.home is None:
            return
        try:
            subprocess.run(
                [CONTROL], input=b"quit\n", env=server_environment(self._env()), timeout=30, capture_output=True, check=False
            )
        except (OSError, subprocess.SubprocessError) as exc:
            log.warning("MPS control daemon did not quit cleanly: %s", exc)
        try:
            shutil.copytree(self.log_dir, self.workdir / "mps-log", dirs_exist_ok=True)
        except OSError as exc:
            log.warning("MPS logs not kept: %s", exc)
        shutil.rmtree(self.home, ignore_errors=True)
        self.home = None

    def __enter__(self) -> MpsDaemon:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
