"""What this host is: CPU, memory and GPUs (via NVML when present; absent, never faked)."""

from __future__ import annotations

import logging
import math
import os
import platform
import socket
from pathlib import Path
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


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _own_dirs(root: Path, controller: str, proc_cgroup: str) -> list[Path]:
    """Where this process's cgroup limits for `controller` may be read: its own group under the mount (a host's
    systemd slice), and the mount itself (a container sees its own group there)."""
    dirs = []
    for line in proc_cgroup.splitlines():
        _, names, path = line.split(":", 2)
        if (controller == "" and names == "") or controller in names.split(","):
            dirs.append(root / (controller or "") / path.lstrip("/"))
    return [*dirs, root / controller] if controller else [*dirs, root]


def cgroup_limits(root: Path = Path("/sys/fs/cgroup"), proc_cgroup: str | None = None) -> tuple[float | None, int | None]:
    """The CPUs (quota / period) and memory (bytes) this process's cgroup allows (v2 cpu.max and memory.max, v1
    cpu.cfs_quota_us and memory.limit_in_bytes); None where it sets none (a pod with requests only: it may use the
    node's)."""
    if proc_cgroup is None:
        proc_cgroup = _read(Path("/proc/self/cgroup")) or ""
    cpus: float | None = None
    memory: int | None = None
    for d in _own_dirs(root, "", proc_cgroup):  # v2: one hierarchy
        if cpus is None and (line := _read(d / "cpu.max")) and not line.startswith("max"):
            allowed, per = line.split()
            cpus = int(allowed) / int(per)
        if memory is None and (limit := _read(d / "memory.max")) and limit != "max":
            memory = int(limit)
    for d in _own_dirs(root, "cpu", proc_cgroup):  # v1
        quota_us, period_us = _read(d / "cpu.cfs_quota_us"), _read(d / "cpu.cfs_period_us")
        if cpus is None and quota_us and period_us and int(quota_us) > 0:
            cpus = int(quota_us) / int(period_us)
    for d in _own_dirs(root, "memory", proc_cgroup):
        limit = _read(d / "memory.limit_in_bytes")
        if memory is None and limit and int(limit) < 2**60:  # v1 says "no limit" with a number near 2**63
            memory = int(limit)
    return cpus, memory


def host_facts() -> HostFacts:
    """Host name, CPU model, the CPUs and memory (MiB) this follower may use: the machine's, or fewer where its
    affinity or its cgroup (a container's, a pod's limits) allows fewer."""
    cpus, memory = cgroup_limits()
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    total = int(psutil.virtual_memory().total)
    return {
        "host": socket.gethostname(),
        "cpu_model": cpu_model(),
        "cpu_count": max(1, min(usable, math.ceil(cpus) if cpus is not None else usable)),
        "memory_mb": min(total, memory if memory is not None else total) // 2**20,
    }


# The packages whose versions can move a number measured through the follower's own environment (its clients, its
# ONNX Runtime and TorchScript servers, the tokenizers); a server in an environment of its own reports its own version
# as the point's backend_version.
KEY_PACKAGES = ("benchfleet", "numpy", "onnxruntime", "torch", "uvloop", "aiohttp", "grpcio", "tokenizers", "transformers")


class PlatformRecord(TypedDict):
    """The environment facts of a reproducibility record (common/wire/results.py Environment)."""

    os: str | None
    kernel: str
    cpu_governor: str | None
    gpu_uuids: list[str]
    gpu_driver: str | None
    cuda: str | None
    packages: dict[str, str]
    image: str | None


def _governor() -> str | None:
    """The CPUs' cpufreq scaling governor ("performance", "powersave", ...; several, comma-joined, if they differ);
    None where the kernel exposes no cpufreq (most VMs)."""
    found = set()
    for cpu in range(os.cpu_count() or 1):
        try:
            with open(f"/sys/devices/system/cpu/cpu{cpu}/cpufreq/scaling_governor", encoding="ascii") as fh:
                found.add(fh.read().strip())
        except OSError:
            continue
    return ",".join(sorted(found)) or None


def _driver() -> tuple[str | None, str | None]:
    """The NVIDIA driver's version and the CUDA version it supports (None, None without NVML)."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except (ImportError, Exception):  # pynvml.NVMLError, or no pynvml
        return None, None
    try:
        driver = pynvml.nvmlSystemGetDriverVersion()
        cuda = pynvml.nvmlSystemGetCudaDriverVersion_v2()
        driver = driver.decode() if isinstance(driver, bytes) else str(driver)
        return driver, f"{cuda // 1000}.{cuda % 1000 // 10}"
    except Exception:  # an NVML call this driver does not have
        return None, None
    finally:
        pynvml.nvmlShutdown()


def platform_record() -> PlatformRecord:
    """This host's facts for every result's reproducibility record (read once, at the agent's start)."""
    from importlib import metadata

    packages = {}
    for name in KEY_PACKAGES:
        try:
            packages[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    try:
        os_name: str | None = platform.freedesktop_os_release().get("PRETTY_NAME")
    except OSError:
        os_name = None
    driver, cuda = _driver()
    return {
        "os": os_name,
        "kernel": platform.release(),
        "cpu_governor": _governor(),
        "gpu_uuids": [gpu.uuid for gpu in gpus() if gpu.uuid],
        "gpu_driver": driver,
        "cuda": cuda,
        "packages": packages,
        "image": os.environ.get("BENCHFLEET_IMAGE") or None,
    }
