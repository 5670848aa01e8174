"""Holding the CPUs' wake-up latency through PM QoS for a measurement, and saying why when it cannot."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest

from follower.host.wakeup import PM_QOS_DEVICE, WakeupHold, cpuidle_driver, hold_wakeup_latency
from follower.settings import FollowerSettings


def _current_bound_us() -> int:
    """The kernel's aggregate CPU latency request: reading the device gives the tightest one any holder asks for."""
    with open(PM_QOS_DEVICE, "rb") as fh:
        return struct.unpack("=i", fh.read(4))[0]


@pytest.mark.skipif(not os.access(PM_QOS_DEVICE, os.W_OK), reason=f"{PM_QOS_DEVICE} is absent or not writable here")
def test_the_bound_holds_inside_the_block_and_ends_with_it() -> None:
    before = _current_bound_us()
    with hold_wakeup_latency(0) as hold:
        assert hold.held_us == 0 and hold.describe().startswith(f"held at 0 µs ({PM_QOS_DEVICE}")
        assert hold.idle_driver == cpuidle_driver()
        assert _current_bound_us() == 0
    # Closing the file ends the request: the bound is what it was (another holder's, or the kernel's default).
    assert _current_bound_us() == before
    with pytest.raises(RuntimeError, match="the point failed"), hold_wakeup_latency(0):
        raise RuntimeError("the point failed")
    assert _current_bound_us() == before  # released when the block fails too


def test_a_missing_or_unusable_device_is_named_not_raised(tmp_path: Path) -> None:
    with hold_wakeup_latency(0, device=str(tmp_path / "absent")) as hold:
        assert hold.held_us is None and "ENOENT" in hold.describe() and "absent" in hold.describe()
    with hold_wakeup_latency(0, device=str(tmp_path)) as hold:
        assert hold.held_us is None and "EISDIR" in hold.describe()


def test_none_leaves_the_host_alone_and_the_setting_accepts_none(monkeypatch: pytest.MonkeyPatch) -> None:
    with hold_wakeup_latency(None) as hold:
        assert hold.held_us is None and "disabled" in hold.describe()
    monkeypatch.setenv("BENCHFLEET_FOLLOWER_TOKEN", "t" * 16)
    assert FollowerSettings().cpu_wakeup_latency_us == 0
    monkeypatch.setenv("BENCHFLEET_FOLLOWER_CPU_WAKEUP_LATENCY_US", "none")
    assert FollowerSettings().cpu_wakeup_latency_us is None
    monkeypatch.setenv("BENCHFLEET_FOLLOWER_CPU_WAKEUP_LATENCY_US", "-1")
    with pytest.raises(ValueError, match="cpu_wakeup_latency_us"):
        FollowerSettings()


def test_a_host_without_a_cpuidle_driver_is_said_to_idle_as_before(tmp_path: Path) -> None:
    driver = tmp_path / "current_driver"
    driver.write_text("none\n")
    assert cpuidle_driver(str(driver)) is None and cpuidle_driver(str(tmp_path / "absent")) is None
    driver.write_text("haltpoll\n")
    assert cpuidle_driver(str(driver)) == "haltpoll"
    assert "no cpuidle driver" in WakeupHold(0, idle_driver=None).describe()
    assert "cpuidle driver haltpoll" in WakeupHold(0, idle_driver="haltpoll").describe()
