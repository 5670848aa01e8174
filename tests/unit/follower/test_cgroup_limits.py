"""What a follower says it may use: the CPUs and memory of its cgroup where those are fewer than the machine's (a
container's or a pod's limits), read from a cgroup tree laid out as the kernel lays it out (v2 and v1)."""

from __future__ import annotations

from pathlib import Path

from follower.host.hostinfo import cgroup_limits


def _write(root: Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")


def test_a_v2_pods_limits_are_read_from_its_own_group(tmp_path: Path) -> None:
    _write(tmp_path, "kubepods/pod1/c1/cpu.max", "150000 100000")
    _write(tmp_path, "kubepods/pod1/c1/memory.max", str(3 * 2**30))
    assert cgroup_limits(tmp_path, "0::/kubepods/pod1/c1\n") == (1.5, 3 * 2**30)


def test_a_container_sees_its_group_at_the_mount_and_no_limit_is_none(tmp_path: Path) -> None:
    _write(tmp_path, "cpu.max", "max 100000")
    _write(tmp_path, "memory.max", "max")
    assert cgroup_limits(tmp_path, "0::/\n") == (None, None)
    _write(tmp_path, "cpu.max", "200000 100000")
    assert cgroup_limits(tmp_path, "0::/\n") == (2.0, None)


def test_v1_quota_and_memory_limit_and_its_no_limit_number(tmp_path: Path) -> None:
    _write(tmp_path, "cpu/docker/abc/cpu.cfs_quota_us", "50000")
    _write(tmp_path, "cpu/docker/abc/cpu.cfs_period_us", "100000")
    _write(tmp_path, "memory/docker/abc/memory.limit_in_bytes", "9223372036854771712")
    cgroup = "4:memory:/docker/abc\n2:cpu,cpuacct:/docker/abc\n0::/\n"
    assert cgroup_limits(tmp_path, cgroup) == (0.5, None)
    _write(tmp_path, "memory/docker/abc/memory.limit_in_bytes", str(2**30))
    _write(tmp_path, "cpu/docker/abc/cpu.cfs_quota_us", "-1")
    assert cgroup_limits(tmp_path, cgroup) == (None, 2**30)
