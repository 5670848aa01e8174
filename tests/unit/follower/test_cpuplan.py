"""The generator thread's isolation: pinned, real-time where permitted (else nice -10), and everything undone."""

from __future__ import annotations

import os
import threading

import pytest

from follower.host.cpuplan import GENERATOR_NICE, generator_priority, isolate_generator_thread


def _in_thread(fn):  # type: ignore[no-untyped-def]
    """Run fn on a fresh thread (priority and affinity are per thread: the test's own thread stays untouched)."""
    out: dict[str, object] = {}

    def target() -> None:
        try:
            out["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed back to the test
            out["error"] = exc

    thread = threading.Thread(target=target)
    thread.start()
    thread.join()
    if "error" in out:
        raise out["error"]  # type: ignore[misc]
    return out["value"]


def _can_fifo() -> bool:
    def probe() -> bool:
        try:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
        except (PermissionError, OSError):
            return False
        os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
        return True

    return bool(_in_thread(probe))


def test_isolation_raises_priority_pins_and_undoes() -> None:
    cpu = min(os.sched_getaffinity(0))

    def run() -> tuple[str, set[int], str, set[int], int]:
        before = generator_priority()
        undo = isolate_generator_thread(frozenset({cpu}))
        during, pinned = generator_priority(), set(os.sched_getaffinity(0))
        undo()
        return before, pinned, during, set(os.sched_getaffinity(0)), os.getpriority(os.PRIO_PROCESS, 0)

    before, pinned, during, after_affinity, after_nice = _in_thread(run)
    assert pinned == {cpu} and after_affinity == set(os.sched_getaffinity(0))
    assert generator_priority() == before and after_nice == os.getpriority(os.PRIO_PROCESS, 0)
    if _can_fifo():
        assert during == "fifo"
    else:
        assert during in ("fifo", f"nice {GENERATOR_NICE}", before)  # unprivileged: pinning only


@pytest.mark.parametrize(("cpus", "realtime"), [(None, True), ("own", False)])
def test_nice_when_realtime_is_off_or_the_core_is_shared(cpus: str | None, realtime: bool) -> None:
    # Unpinned (a 1-CPU host: the server shares the core), a real-time generator would starve the server.
    own = frozenset({min(os.sched_getaffinity(0))}) if cpus else None

    def run() -> str:
        undo = isolate_generator_thread(own, realtime=realtime)
        try:
            return generator_priority()
        finally:
            undo()

    during = _in_thread(run)
    if os.geteuid() != 0:
        pytest.skip("raising a thread's priority needs CAP_SYS_NICE; this user has none")
    assert during == f"nice {GENERATOR_NICE}"


_REFUSED_PROBE = """
import threading
from follower.host.cpuplan import isolate_generator_thread
out = {}
def run():
    iso = isolate_generator_thread(frozenset({min(__import__("os").sched_getaffinity(0))}))
    out["v"] = (iso.scheduling, iso.fifo_refused, iso.describe())
    iso()
t = threading.Thread(target=run); t.start(); t.join()
print(repr(out["v"]))
"""


def test_a_refused_fifo_names_its_errno_and_rule() -> None:
    # A real refusal: the probe runs without CAP_SYS_NICE (setpriv drops it) and RLIMIT_RTPRIO 0.
    import ast
    import shutil
    import subprocess
    import sys

    setpriv = shutil.which("setpriv")
    if setpriv is None or os.geteuid() != 0:
        pytest.skip("needs root and setpriv (util-linux) to drop CAP_SYS_NICE for the probe")
    proc = subprocess.run(
        [setpriv, "--inh-caps=-sys_nice", "--bounding-set=-sys_nice", sys.executable, "-c", _REFUSED_PROBE],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    scheduling, refused, described = ast.literal_eval(proc.stdout.strip().splitlines()[-1])
    assert scheduling.startswith("nice ")
    assert refused is not None and refused.startswith("EPERM (") and "no CAP_SYS_NICE" in refused
    assert described == f"{scheduling} (SCHED_FIFO refused: {refused})"


def test_fifo_granted_has_no_refusal() -> None:
    def run() -> tuple[str, str | None]:
        iso = isolate_generator_thread(frozenset({min(os.sched_getaffinity(0))}))
        try:
            return iso.scheduling, iso.fifo_refused
        finally:
            iso()

    scheduling, refused = _in_thread(run)
    if _can_fifo():
        assert (scheduling, refused) == ("fifo", None)
    else:
        assert scheduling.startswith("nice ") and refused and refused.split(" ", 1)[0] in ("EPERM", "EINVAL")


def test_rt_group_reason_names_the_v2_group_that_holds_the_cpu_controller(monkeypatch: pytest.MonkeyPatch) -> None:
    # The GPU host's layout: the root enables cpu for /process_api, which enables only memory for its children, so
    # the thread in /process_api/<id> is scheduled in /process_api (a non-root group: no real-time runtime).
    import follower.host.cpuplan as cpuplan

    files = {
        "/sys/fs/cgroup/cgroup.subtree_control": "cpuset cpu io memory hugetlb pids",
        "/sys/fs/cgroup/process_api/cgroup.subtree_control": "memory",
        "/proc/self/cgroup": "0::/process_api/abc",
    }
    monkeypatch.setattr(cpuplan, "_read", files.get)
    reason = cpuplan._rt_group_reason("/process_api/abc")
    assert "group is cgroup '/process_api'," in reason and "no real-time runtime" in reason
