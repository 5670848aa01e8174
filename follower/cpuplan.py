"""Keep the load generator and the server under test off each other's cores.

On a small host the generator and the model server compete for CPU; every time the scheduler preempts the
generator for the server, a request goes out late (send lag). So, where at least two cores are ours, the
generator's thread gets the first core and the server the rest, and the generator thread asks for a higher
scheduling priority (best effort: it needs CAP_SYS_NICE). What was applied is recorded with the result.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from dataclasses import dataclass

GENERATOR_NICE = -10


@dataclass(frozen=True)
class CpuPlan:
    """Which CPUs the generator thread and the server process use; None means unpinned."""

    generator: frozenset[int] | None
    server: frozenset[int] | None


def plan_cpus() -> CpuPlan:
    """Split the CPUs this process may use: the first for the generator, the rest for the server."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        return CpuPlan(generator=None, server=None)
    return CpuPlan(generator=frozenset(cpus[:1]), server=frozenset(cpus[1:]))


def isolate_generator_thread(cpus: frozenset[int] | None) -> Callable[[], None]:
    """Pin the calling thread (Linux affinity and nice are per thread) and raise its priority; returns an undo."""
    tid = 0  # 0 = the calling thread for both sched_setaffinity and setpriority on Linux
    old_affinity = os.sched_getaffinity(tid)
    old_nice = os.getpriority(os.PRIO_PROCESS, tid)
    if cpus:
        os.sched_setaffinity(tid, cpus)
    # Unprivileged, raising priority fails: the pinning alone still keeps the server off the generator's core.
    with contextlib.suppress(PermissionError):
        os.setpriority(os.PRIO_PROCESS, tid, GENERATOR_NICE)

    def undo() -> None:
        os.sched_setaffinity(tid, old_affinity)
        with contextlib.suppress(PermissionError):
            os.setpriority(os.PRIO_PROCESS, tid, old_nice)

    return undo


def cpu_times() -> tuple[int, int] | None:
    """(steal, total) jiffies of all CPUs from /proc/stat, or None where there is no such file."""
    try:
        with open("/proc/stat", encoding="ascii") as fh:
            fields = fh.readline().split()
    except OSError:
        return None
    values = [int(v) for v in fields[1:9]]  # user nice system idle iowait irq softirq steal
    return values[7], sum(values)


def steal_share(before: tuple[int, int] | None, after: tuple[int, int] | None) -> float | None:
    """The share of CPU time the hypervisor took from this VM between two cpu_times() readings."""
    if before is None or after is None or after[1] <= before[1]:
        return None
    return (after[0] - before[0]) / (after[1] - before[1])
