"""The whole system as processes: a leader and followers started for real against real Redis and SecantusDB."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest

from benchfleet.stack import LocalStack


@pytest.fixture(scope="module")
def fleet(mongo_service, redis_service, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:  # type: ignore[no-untyped-def]
    """A leader of its own on the session's Redis and database; `fleet.start_follower(id)` adds followers (they get
    `fleet.env` as it is then) and waits until the leader lists them."""
    base_env = {
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": os.environ.get("PYTHONPATH", ""),  # the test's import path (a --target install of deps, say)
    }
    env = {
        "BENCHFLEET_LEADER_MISSING_AFTER_S": "3",
        "BENCHFLEET_FOLLOWER_HEARTBEAT_INTERVAL_S": "0.5",
    }
    stack = LocalStack(tmp_path_factory.mktemp("fleet"), mongo_uri=mongo_service.url, redis_url=redis_service.url,
                       db_name=f"e2e_{uuid.uuid4().hex[:8]}", base_env=base_env, env=env)  # fmt: skip
    with stack:
        stack.start_leader()
        yield stack
