"""What this host is: CPU, memory and GPUs (via NVML when present; absent, never faked)."""

from __future__ import annotations

import logging
import os
import platform
import socket
from typing import TypedDict

import psutil

from common.wire.followers import GpuInfo

log = logging.getLogger(__name__)


def cpu_model() -> str:
    """The CPU's marketing name from /proc/cpuinfo, or the platform's processor string."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def gpus() -> list[GpuInfo]:
    """GPUs as NVML sees them; an empty list when NVML or a driver is missing."""
    try:
        import pynvml
    except ImportError:
        return []
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        log.info("no GPU: NVML unavailable (%s)", exc)
        return []
    try:
        found = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            name = pynvml.nvmlDeviceGetName(handle)
            memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
            uuid = pynvml.nvmlDeviceGetUUID(handle)
            found.append(
                GpuInfo(
                    index=index,
                    name=name.decode() if isinstance(name, bytes) else name,
                    memory_mb=int(memory.total // 2**20),
                    uuid=uuid.decode() if isinstance(uuid, bytes) else uuid,
                )
            )
        return found
    finally:
        pynvml.nvmlShutdown()


class HostFacts(TypedDict):
    """What a follower tells the leader about its host."""

    host: str
    cpu_model: str
    cpu_count: int
    memory_mb: int


def host_facts() -> HostFacts:
    """Host name, CPU model and count, memory in MiB."""
    return {
        "host": socket.gethostname(),
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count() or 1,
        "memory_mb": int(psutil.virtual_memory().total // 2**20),
    }
