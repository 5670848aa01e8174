"""The follower's outbox on a full disk: the write fails loudly (ENOSPC) and leaves no half-written report behind."""

from __future__ import annotations

import errno
import os
import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from common.wire.jobs import PointReport
from follower.link.outbox import Outbox
from tests.faults.outcomes import record
from tests.integration.leader.conftest import point_result


@pytest.fixture
def tiny_fs(tmp_path: Path) -> Iterator[Path]:
    """A 64 KiB tmpfs (we are root here); skipped with the reason where mounting is impossible."""
    mount = tmp_path / "small"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs for a full disk: {done.stderr.strip() or done.returncode}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=False)


def test_full_disk_fails_the_write_and_leaves_nothing_half_written(tiny_fs: Path) -> None:
    outbox = Outbox(tiny_fs / "outbox")
    report = PointReport.model_validate({"attempt": 1, "follower_id": "f1", "result": point_result(0, "f1")})
    outbox.put("job1", report)
    assert [p.name for p in outbox.pending("job1")] == ["job1-1-0.json"]
    # Fill the disk.
    fd = os.open(tiny_fs / "filler", os.O_WRONLY | os.O_CREAT)
    try:
        with pytest.raises(OSError):
            while True:
                os.write(fd, b"x" * 4096)
    finally:
        os.close(fd)
    later = report.model_copy(update={"result": report.result.model_copy(update={"started_at": datetime.now(UTC)})})
    second = PointReport.model_validate({**later.model_dump(mode="json"), "result": point_result(1, "f1")})
    with pytest.raises(OSError) as info:
        outbox.put("job1", second)
    assert info.value.errno == errno.ENOSPC
    # The earlier, complete report is intact; no partial file for the failed one.
    assert [p.name for p in outbox.pending("job1")] == ["job1-1-0.json"]
    assert not list((tiny_fs / "outbox").glob("*.tmp"))
    record("fault", "follower disk full while buffering a point result (64 KiB tmpfs)",
           "write fails with ENOSPC (the attempt fails with that reason); earlier results intact, no half file")
