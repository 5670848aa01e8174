"""A fleet check over four real followers: none is flagged while they are equal (a first-round suspect, when this
shared host's noise makes one, is re-run alone and cleared); one slowed on purpose is flagged, re-run alone and still
slow, marked in the follower list with its evidence, and the CLI exits 5.

The slow machine is made by pinning its server to a busy core: spinning processes hold the server cores, and that
follower (with the servers it starts) has a tenth of their CPU weight, so its server waits behind them, as on a host
shared with a noisy neighbour: slowed many times over, yet still with the CPU its light load needs (a weight so low
that the server falls behind its 20 req/s leaves the point without answers, a figure that varies from run to run).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from benchfleet.generate.modelgen import mlp_onnx

pytestmark = pytest.mark.e2e

CPU_CGROUP = Path("/sys/fs/cgroup/cpu")
FOLLOWERS = ["fc1", "fc2", "fc3", "fc4"]


@contextlib.contextmanager
def server_on_a_busy_core(pid: int) -> Iterator[None]:
    """Keep every server core busy with a spinning process, and hold `pid` (a follower, and what it starts from now
    on) to a tenth of their CPU weight (cgroup v1 cpu.shares 100 against the spinners' 1024): that follower's server, pinned
    to those cores, waits behind the spinners; the other followers' servers take their fair share at once. Skips
    where cgroup v1's cpu controller is not writable here."""
    group = CPU_CGROUP / f"benchfleet-test-{os.getpid()}"
    try:
        group.mkdir()
        (group / "cpu.shares").write_text("100")
        (group / "cgroup.procs").write_text(str(pid))
    except OSError as exc:
        with contextlib.suppress(OSError):
            group.rmdir()
        pytest.skip(f"cannot lower a follower's CPU weight with a cgroup here: {exc}")
    server_cores = sorted(os.sched_getaffinity(0))[1:]  # a follower's plan: the first core for its generator
    spin = "import os, sys; os.sched_setaffinity(0, {int(sys.argv[1])})\nwhile True: pass"
    spinners = [subprocess.Popen([sys.executable, "-c", spin, str(core)]) for core in server_cores]
    try:
        yield
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()
        for task in (group / "cgroup.procs").read_text().split():
            with contextlib.suppress(OSError):
                (CPU_CGROUP / "cgroup.procs").write_text(task)
        with contextlib.suppress(OSError):
            group.rmdir()


def fleet_check(fleet) -> subprocess.CompletedProcess[str]:  # type: ignore[no-untyped-def]
    env = {**os.environ, "BENCHFLEET_URL": fleet.url, "BENCHFLEET_TOKEN": fleet.admin_token, "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "benchfleet", "fleet-check", "mlp-check:1", "--rate", "20",
                           "--duration", "4"], env=env, capture_output=True, text=True, timeout=300)  # fmt: skip


def test_a_fleet_check_flags_none_of_four_equal_followers_and_the_one_slowed(fleet) -> None:  # type: ignore[no-untyped-def]
    fleet.env["BENCHFLEET_FOLLOWER_METRICS_PORT"] = "-1"
    procs = {f: fleet.start_follower(f) for f in FOLLOWERS}
    with fleet.client() as client:
        client.upload_model(mlp_onnx(inputs=64, hidden=256, layers=2), name="mlp-check", version="1")

    equal = fleet_check(fleet)
    assert equal.returncode == 0, equal.stdout + equal.stderr
    assert "outliers: none" in equal.stdout and equal.stdout.count("fc") >= 4, equal.stdout

    with server_on_a_busy_core(procs["fc3"].pid):
        slowed = fleet_check(fleet)
    print(equal.stdout, slowed.stdout)
    assert slowed.returncode == 5, slowed.stdout + slowed.stderr
    assert "outliers: fc3" in slowed.stdout, slowed.stdout
    assert "fc3: a suspect in the first round, re-run alone (its figure above): still an outlier" in slowed.stdout
    with fleet.client() as client:
        marked = {f.info.follower_id: f.anomaly for f in client.followers()}
    assert marked["fc3"] is not None and "vs class median" in marked["fc3"].evidence
    assert [f for f, a in marked.items() if a is not None] == ["fc3"]
