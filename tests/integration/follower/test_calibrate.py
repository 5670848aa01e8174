"""The generator's cost per request against a target, measured against real servers and kept across restarts."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from common.procs import SupervisedProcess, free_port, http_ready
from follower.loadgen.calibrate import TargetCosts, calibrate
from follower.protocols import Endpoint

ROOT = Path(__file__).resolve().parents[3]
SERVER = ROOT / "tests" / "integration" / "follower" / "capacity_server.py"


@pytest.fixture
def server(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Endpoint]:
    service_ms, workers = request.param
    port = free_port()
    argv = [sys.executable, str(SERVER), "--port", str(port), "--service-ms", str(service_ms), "--workers", str(workers)]
    with SupervisedProcess(argv, name="capacity server", log_path=tmp_path / "server.log") as proc:
        proc.wait_ready(http_ready(f"http://127.0.0.1:{port}/ready"), timeout_s=30)
        yield Endpoint("kserve-http", f"http://127.0.0.1:{port}", "m")


@pytest.mark.parametrize("server", [(0.0, 0)], indirect=True)
def test_a_fast_target_gives_a_cost_per_request_and_it_is_kept(server: Endpoint, tmp_path: Path) -> None:
    cost = calibrate(server, [b'{"inputs": []}'], duration_s=0.5)
    assert cost is not None and 1e-6 < cost < 5e-3  # CPU per request of one client thread: microseconds, not seconds
    kept = TargetCosts(tmp_path / "costs.json")
    kept.put(f"kserve-http {server}", cost)
    assert TargetCosts(tmp_path / "costs.json").all() == {f"kserve-http {server}": round(cost * 1e6, 2)}


@pytest.mark.parametrize("server", [(50.0, 1)], indirect=True)
def test_a_slow_target_says_nothing_rather_than_a_guess(server: Endpoint) -> None:
    # 50 ms a request, one at a time: 10 answers in half a second, fewer than the 50 a figure needs.
    assert calibrate(server, [b'{"inputs": []}'], duration_s=0.5) is None
