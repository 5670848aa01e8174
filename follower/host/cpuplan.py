"""Keep the load generator and the server under test off each other's cores.

On a small host the generator and the model server compete for CPU; every time the scheduler preempts the
generator for the server, a request goes out late (send lag). So, where at least two cores are ours, the
generator's thread gets the first core and the server the rest, and the generator thread asks for a higher
scheduling priority (best effort: it needs CAP_SYS_NICE).

Priority: the generator thread runs under SCHED_FIFO (lowest real-time priority) where permitted, else at nice -10.
A thread's nice alone does not help against other sessions' processes when the kernel groups tasks by session
(kernel.sched_autogroup_enabled=1, the default on desktop and many server kernels): bench/send_lag_causes.py on a
2-core VM shared with other test runs measured the generator thread waiting for its core 14-64% of the run at nice
-10 (send-lag p99 2.6-99 ms at 2000-5000 req/s), and 0.2-0.4% under SCHED_FIFO (send-lag p99 0.13-1.06 ms). The
generator blocks on its timerfd between sends, and the kernel's real-time throttling (sched_rt_runtime_us) leaves
the core's other tasks their share even if it did not.

Where SCHED_FIFO is refused, Isolation.fifo_refused names the errno and the rule (fifo_refusal_reason). On the
16-core GPU host the bench runs as root with CAP_SYS_NICE and is still refused (EPERM): its process sits in a cgroup
v2 group under the cpu controller on a CONFIG_RT_GROUP_SCHED kernel, which gives a non-root group no real-time
runtime. There, nobody else's work shares the generator's core, and at nice -10 send-lag p99 stayed 0.021-0.036 ms
up to 20,000 req/s (docs/loadgen/bench_loadgen_16core.log).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from dataclasses import dataclass

GENERATOR_NICE = -10
# SCHED_FIFO priority of the generator thread: the lowest real-time one still preempts every normal process.
GENERATOR_RT_PRIORITY = 1


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


class Isolation:
    """What isolate_generator_thread did to the calling thread; calling it undoes it.

    `scheduling` is "fifo" or "nice N"; `fifo_refused` says why SCHED_FIFO was not used when it was wanted and the
    thread has a core of its own (the errno of the refused call and what on this host refuses it), else None.
    """

    def __init__(self, undo: Callable[[], None], scheduling: str, fifo_refused: str | None) -> None:
        self._undo, self.scheduling, self.fifo_refused = undo, scheduling, fifo_refused

    def __call__(self) -> None:
        self._undo()

    def describe(self) -> str:
        """The scheduling in words, with the reason real-time was refused where it was."""
        return self.scheduling + (f" (SCHED_FIFO refused: {self.fifo_refused})" if self.fifo_refused else "")


def isolate_generator_thread(cpus: frozenset[int] | None, *, realtime: bool = True) -> Isolation:
    """Pin the calling thread (Linux affinity and priority are per thread) and raise its priority; returns an undo.

    Real-time (SCHED_FIFO) where permitted, `realtime` and the thread has cores of its own (`cpus`), else nice -10
    (see the module docstring). The returned Isolation names the outcome and, on a fallback, its reason.
    """
    tid = 0  # 0 = the calling thread for sched_setaffinity, sched_setscheduler and setpriority on Linux
    old_affinity = os.sched_getaffinity(tid)
    old_nice = os.getpriority(os.PRIO_PROCESS, tid)
    old_policy = os.sched_getscheduler(tid) if hasattr(os, "sched_getscheduler") else None
    if cpus:
        os.sched_setaffinity(tid, cpus)
    fifo = False
    refused: str | None = None
    # Only on a core of its own: sharing one with the server, a real-time generator would starve what it measures.
    if realtime and cpus and old_policy is not None:
        # Unprivileged (no CAP_SYS_NICE, or no real-time budget in this cgroup) it is refused: nice is the fallback.
        try:
            os.sched_setscheduler(tid, os.SCHED_FIFO, os.sched_param(GENERATOR_RT_PRIORITY))
            fifo = True
        except OSError as exc:
            refused = fifo_refusal_reason(exc)
    if not fifo:
        # Unprivileged, raising priority fails: the pinning alone still keeps the server off the generator's core.
        with contextlib.suppress(PermissionError):
            os.setpriority(os.PRIO_PROCESS, tid, GENERATOR_NICE)
    scheduling = generator_priority()

    def undo() -> None:
        os.sched_setaffinity(tid, old_affinity)
        if fifo and old_policy is not None:
            os.sched_setscheduler(tid, old_policy, os.sched_param(0))
        with contextlib.suppress(PermissionError):
            os.setpriority(os.PRIO_PROCESS, tid, old_nice)

    return Isolation(undo, scheduling, refused)


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii") as fh:
            return fh.read().strip()
    except (OSError, UnicodeDecodeError):
        return None


def _rt_group_reason(cgroup_v2: str | None) -> str:
    """Which cgroup holds no real-time runtime for the thread (CONFIG_RT_GROUP_SCHED), in words."""
    for line in (_read("/proc/self/cgroup") or "").splitlines():
        _, controllers, path = line.split(":", 2)
        if "cpu" in controllers.split(","):  # cgroup v1: cpu.rt_runtime_us is the group's real-time budget
            for base in ("/sys/fs/cgroup/cpu,cpuacct", "/sys/fs/cgroup/cpu"):
                budget = _read(f"{base}{path.rstrip('/')}/cpu.rt_runtime_us")
                if budget is not None:
                    return f"the thread's cgroup {path!r} has cpu.rt_runtime_us={budget} (v1)"
    if cgroup_v2 and cgroup_v2 != "/":
        # A v2 group without the cpu controller belongs, for CPU scheduling, to its nearest ancestor that has it.
        group, effective = cgroup_v2.rstrip("/"), None
        while group not in ("", "/"):
            parent = os.path.dirname(group)
            if "cpu" in (_read(f"/sys/fs/cgroup{parent.rstrip('/')}/cgroup.subtree_control") or "").split():
                effective = group
                break
            group = parent
        where = f"cgroup {effective!r}" if effective else f"cgroup {cgroup_v2!r} (probably)"
        # cgroup v2 has no cpu.rt_runtime_us: a non-root group under the cpu controller gets 0 and cannot be granted any
        return (
            f"the thread's CPU scheduling group is {where}, a non-root cgroup v2 group under the cpu controller, "
            "which gets no real-time runtime (the generator would need the root cgroup, or a kernel without "
            "CONFIG_RT_GROUP_SCHED)"
        )
    return "its cgroup has no real-time runtime"


def fifo_refusal_reason(exc: OSError) -> str:
    """Why sched_setscheduler(SCHED_FIFO) failed here: its errno, then which of the kernel's rules refuses it.

    The kernel refuses a real-time policy (EPERM) when the caller lacks CAP_SYS_NICE and RLIMIT_RTPRIO is below the
    priority, or, even for root, when the thread's cgroup has no real-time runtime (CONFIG_RT_GROUP_SCHED: a cgroup
    gets 0 us of real-time time per period unless cgroup v1's cpu.rt_runtime_us grants some; v2 has no such knob).
    """
    import errno as errno_mod
    import resource

    code = errno_mod.errorcode.get(exc.errno or 0, str(exc.errno))
    parts = [f"{code} ({exc.strerror or exc})"]
    status = _read("/proc/thread-self/status") or _read("/proc/self/status") or ""
    cap_eff = next((line.split()[1] for line in status.splitlines() if line.startswith("CapEff:")), None)
    has_nice = cap_eff is not None and bool(int(cap_eff, 16) >> 23 & 1)  # CAP_SYS_NICE is capability 23
    rtprio = resource.getrlimit(resource.RLIMIT_RTPRIO)[0] if hasattr(resource, "RLIMIT_RTPRIO") else None
    cgroup = next(
        (line.split(":", 2)[2] for line in (_read("/proc/self/cgroup") or "").splitlines() if line.startswith("0::")), None
    )  # the cgroup v2 path
    rt_runtime = _read("/proc/sys/kernel/sched_rt_runtime_us")
    if cap_eff is not None and not has_nice and (rtprio is None or rtprio < GENERATOR_RT_PRIORITY):
        parts.append(f"no CAP_SYS_NICE (euid {os.geteuid()}) and RLIMIT_RTPRIO {rtprio}")
    elif rt_runtime == "0":
        parts.append("kernel.sched_rt_runtime_us=0 gives real-time tasks no CPU time")
    elif has_nice or os.geteuid() == 0:
        parts.append("CAP_SYS_NICE held, so the kernel's RT group scheduling refused it: " + _rt_group_reason(cgroup))
    else:
        parts.append(f"euid {os.geteuid()}, RLIMIT_RTPRIO {rtprio}")
    return "; ".join(parts)


def generator_priority() -> str:
    """The calling thread's scheduling as a word: "fifo" (real-time), or "nice N"."""
    if hasattr(os, "sched_getscheduler") and os.sched_getscheduler(0) == os.SCHED_FIFO:
        return "fifo"
    return f"nice {os.getpriority(os.PRIO_PROCESS, 0)}"


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


def thread_run_queue_ns() -> int | None:
    """How long the calling thread has been runnable but waiting for a CPU (ns), or None where the kernel says not.

    /proc/thread-self/schedstat: on-CPU ns, run-queue wait ns, timeslices. A generator that waits for its core
    behind other processes sends late however it is written; the verdict names that share beside the send lag.
    """
    try:
        with open("/proc/thread-self/schedstat", encoding="ascii") as fh:
            return int(fh.read().split()[1])
    except (OSError, ValueError, IndexError):
        return None
