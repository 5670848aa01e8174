"""Keep the host's CPUs from sleeping deeply while a point is measured (Linux PM QoS, /dev/cpu_dma_latency).

A request crosses two processes that mostly wait: the generator sleeps until the next send, the server until the
next request. An idle CPU halts; waking it costs a C-state exit on bare metal (tens to hundreds of µs) and, in a VM,
an exit to the hypervisor that reschedules the vCPU (counted as steal). On this project's 2-core Firecracker VM
(cpuidle driver haltpoll, guest_halt_poll_ns=0) bench/repeatability.py's point measured, five runs each way,
interleaved (docs/loadgen/repeatability_2core.log):

  idle CPUs halt (the host's policy):  steal 1.2-12.7%, p50 1.50-3.03 ms, send-lag p99 1.4-7.3 ms, 0/5 runs valid
  wake-up latency held at 0 µs:        steal 0.3-1.9%,  p50 1.20-1.54 ms, send-lag p99 0.11-0.58 ms, 5/5 runs valid

and the p50 followed steal across runs (r = +0.99 halting): the host's idle policy, not the server, set the numbers.

Writing a latency bound to /dev/cpu_dma_latency and keeping the file open is the kernel's PM QoS interface (what
tuned's latency-performance profile does): while held, cpuidle picks only states that wake within the bound, so 0
makes idle CPUs poll instead of halting. The request ends when the file is closed, so it lasts exactly as long as
the measurement. The cost is power: idle CPUs spin. That is CPU power, which the resource sampler does not count
(it measures the GPU through NVML), so GPU energy per request is unaffected. Opening the file needs root (or a
udev rule granting it); where it is refused or absent the point runs as the host is and the result says why. A host
without a cpuidle driver (the 16-core GPU host of docs/loadgen/ had none) idles the same way whatever the bound, so
the description names the driver, or its absence.
"""

from __future__ import annotations

import contextlib
import errno
import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass

PM_QOS_DEVICE = "/dev/cpu_dma_latency"
CPUIDLE_DRIVER = "/sys/devices/system/cpu/cpuidle/current_driver"


@dataclass(frozen=True)
class WakeupHold:
    """What hold_wakeup_latency achieved: the bound it holds (µs) or, when it holds none, why."""

    held_us: int | None
    reason: str | None = None
    idle_driver: str | None = None  # the cpuidle driver the bound steers; None: the host has none

    def describe(self) -> str:
        """In words, for PointResult.cpu_wakeup_latency and the log."""
        if self.held_us is None:
            return f"not held: {self.reason}"
        if self.idle_driver is None:
            return f"held at {self.held_us} µs ({PM_QOS_DEVICE}), but no cpuidle driver here: idle CPUs sleep as before"
        return f"held at {self.held_us} µs ({PM_QOS_DEVICE}, cpuidle driver {self.idle_driver})"


def cpuidle_driver(path: str = CPUIDLE_DRIVER) -> str | None:
    """The host's cpuidle driver (e.g. intel_idle, acpi_idle, haltpoll), or None when it has none."""
    try:
        with open(path, encoding="ascii") as fh:
            name = fh.read().strip()
    except (OSError, UnicodeDecodeError):
        return None
    return name if name and name != "none" else None


@contextlib.contextmanager
def hold_wakeup_latency(max_us: int | None, device: str = PM_QOS_DEVICE) -> Iterator[WakeupHold]:
    """Hold the CPUs' wake-up latency at `max_us` µs for the duration of the block (None: leave the host as it is)."""
    if max_us is None:
        yield WakeupHold(None, "disabled (BENCHFLEET_FOLLOWER_CPU_WAKEUP_LATENCY_US=none)")
        return
    # Refusals are worked out before yielding, so an error in the caller's block is not chained to them.
    refused: str | None = None
    try:
        fd = os.open(device, os.O_WRONLY | os.O_CLOEXEC)
    except OSError as exc:
        why = "needs root or write access to it" if exc.errno in (errno.EACCES, errno.EPERM) else "no PM QoS here"
        refused = f"{device}: {errno.errorcode.get(exc.errno or 0, exc.errno)} ({why})"
    if refused is not None:
        yield WakeupHold(None, refused)
        return
    try:
        try:
            os.write(fd, struct.pack("=i", max_us))
            hold = WakeupHold(max_us, idle_driver=cpuidle_driver())
        except OSError as exc:
            hold = WakeupHold(None, f"{device}: writing {max_us} failed: {errno.errorcode.get(exc.errno or 0, exc.errno)}")
        yield hold
    finally:
        os.close(fd)  # closing the file ends the request
