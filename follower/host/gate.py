"""Whether this host is fit to start a benchmark now: no foreign process on its GPUs, host CPU under a threshold."""

from __future__ import annotations

import contextlib
import logging
import os

import psutil

log = logging.getLogger(__name__)


def own_pids() -> set[int]:
    """This agent and every process it started (model servers, generators)."""
    me = psutil.Process(os.getpid())
    pids = {me.pid}
    with contextlib.suppress(psutil.Error):  # a child that just exited is simply not ours any more
        pids.update(child.pid for child in me.children(recursive=True))
    return pids


def foreign_gpu_processes() -> list[tuple[int, int, int]]:
    """(gpu index, pid, used MiB) of processes on this host's GPUs that are not ours; empty without NVML or a GPU."""
    try:
        import pynvml
    except ImportError:
        return []
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return []
    try:
        mine = own_pids()
        found = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            procs = list(pynvml.nvmlDeviceGetComputeRunningProcesses(handle))
            procs += list(pynvml.nvmlDeviceGetGraphicsRunningProcesses(handle))
            for proc in procs:
                if proc.pid not in mine:
                    used = int((proc.usedGpuMemory or 0) // 2**20) if isinstance(proc.usedGpuMemory, int) else 0
                    found.append((index, int(proc.pid), used))
        return found
    except pynvml.NVMLError as exc:
        log.warning("NVML process list failed: %s", exc)
        return []
    finally:
        pynvml.nvmlShutdown()


def describe_foreign(found: list[tuple[int, int, int]]) -> str:
    """`NAME (pid N) on GPU i, M MiB` for each foreign process (its name where it still runs)."""

    def name(pid: int) -> str:
        try:
            return psutil.Process(pid).name()
        except psutil.Error:
            return "a process that has ended"

    return ", ".join(f"{name(pid)} (pid {pid}) on GPU {gpu}, {mib} MiB" for gpu, pid, mib in found[:5])


class Gate:
    """Decides whether the next job may start; the reason it may not is reported in the heartbeat."""

    def __init__(self, *, check_gpu: bool = True, max_host_cpu_percent: float | None = None) -> None:
        self.check_gpu = check_gpu
        self.max_host_cpu_percent = max_host_cpu_percent
        psutil.cpu_percent(interval=None)  # primes the counter: the next call measures since now

    def why_wait(self) -> str | None:
        """None when the host is fit; otherwise why the next job waits."""
        if self.check_gpu:
            foreign = foreign_gpu_processes()
            if foreign:
                return f"waiting: a foreign process uses the GPU: {describe_foreign(foreign)}"
        if self.max_host_cpu_percent is not None:
            # Measured since the previous call (the run loop polls about once a second); our own servers are stopped then.
            busy = psutil.cpu_percent(interval=None)
            if busy > self.max_host_cpu_percent:
                return f"waiting: host CPU {busy:.0f}% is above the {self.max_host_cpu_percent:.0f}% threshold"
        return None
