"""The whole system as processes: a leader and followers started for real against real Redis and SecantusDB."""

from __future__ import annotations

import os
import secrets
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from benchfleet.client import BenchfleetClient
from common.procs import SupervisedProcess, free_port, http_ready


@dataclass
class Fleet:
    """A running leader, the env its processes share, and the followers started so far."""

    url: str
    admin_token: str
    env: dict[str, str]
    workdir: Path
    leader: SupervisedProcess
    followers: list[SupervisedProcess] = field(default_factory=list)

    def client(self) -> BenchfleetClient:
        return BenchfleetClient(self.url, self.admin_token)

    def start_follower(self, follower_id: str, *, wait: bool = True) -> SupervisedProcess:
        """Start a follower agent process and (optionally) wait until the leader lists it as ready."""
        env = {
            **self.env,
            "BENCHFLEET_FOLLOWER_FOLLOWER_ID": follower_id,
            "BENCHFLEET_FOLLOWER_WORK_DIR": str(self.workdir / follower_id),
            "BENCHFLEET_FOLLOWER_HEARTBEAT_INTERVAL_S": "0.5",
        }
        n = sum(1 for f in self.followers if f.name.startswith(follower_id))
        proc = SupervisedProcess([sys.executable, "-m", "follower"], name=f"{follower_id}-{n}",
                                 log_path=self.workdir / f"{follower_id}-{n}.log", env=env)
        self.followers.append(proc)
        proc.start()
        if wait:
            with self.client() as client:
                proc.wait_ready(
                    lambda: any(f.info.follower_id == follower_id and f.state != "missing" for f in client.followers()),
                    timeout_s=60,
                )
        return proc


@pytest.fixture(scope="module")
def fleet(mongo_service, redis_service, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:  # type: ignore[no-untyped-def]
    workdir = tmp_path_factory.mktemp("fleet")
    port = free_port()
    admin_token, follower_token = secrets.token_urlsafe(24), secrets.token_urlsafe(24)
    url = f"http://127.0.0.1:{port}"
    env = {
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": os.environ.get("PYTHONPATH", ""),  # the test's import path (a --target install of deps, say)
        "PYTHONUNBUFFERED": "1",
        "BENCHFLEET_MONGO_URI": mongo_service.url,
        "BENCHFLEET_REDIS_URL": redis_service.url,
        "BENCHFLEET_LEADER_DB_NAME": f"e2e_{uuid.uuid4().hex[:8]}",
        "BENCHFLEET_LEADER_PORT": str(port),
        "BENCHFLEET_LEADER_ADMIN_TOKEN": admin_token,
        "BENCHFLEET_LEADER_FOLLOWER_TOKEN": follower_token,
        "BENCHFLEET_LEADER_MISSING_AFTER_S": "3",
        "BENCHFLEET_LEADER_GRPC_PORT": str(free_port()),  # live progress; a fixed port would clash between fleets
        "BENCHFLEET_FOLLOWER_LEADER_URL": url,
        "BENCHFLEET_FOLLOWER_TOKEN": follower_token,
    }
    leader = SupervisedProcess([sys.executable, "-m", "leader"], name="leader", log_path=workdir / "leader.log", env=env)
    leader.start()
    fleet = Fleet(url=url, admin_token=admin_token, env=env, workdir=workdir, leader=leader)
    try:
        leader.wait_ready(http_ready(f"{url}/healthz"), timeout_s=60)
        yield fleet
    finally:
        for proc in fleet.followers:
            proc.stop()
        leader.stop()
