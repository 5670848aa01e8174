"""A stack on free ports takes none of the README fleet's fixed ones: a demo or a test beside `benchfleet fleet up`
(8700, and 8701 for live progress) neither takes them nor fails to bind them. Seen in a run: `demo --llm`'s leader held
8701 while the README newcomer test wanted it."""

from __future__ import annotations

from pathlib import Path

from benchfleet.stack import LocalStack
from benchfleet.up import DEFAULT_PORT


def test_a_stack_on_a_free_port_gets_a_free_progress_port_and_the_readme_fleet_keeps_its_own(tmp_path: Path) -> None:
    free = LocalStack(tmp_path / "free", base_env={})
    grpc = int(free.env["BENCHFLEET_LEADER_GRPC_PORT"])
    assert free.leader_port not in (DEFAULT_PORT, DEFAULT_PORT + 1) and grpc not in (DEFAULT_PORT, DEFAULT_PORT + 1)
    readme = LocalStack(tmp_path / "readme", base_env={}, leader_port=DEFAULT_PORT)
    assert "BENCHFLEET_LEADER_GRPC_PORT" not in readme.env  # the leader's default, 8701, as the README says
    chosen = LocalStack(tmp_path / "chosen", base_env={}, env={"BENCHFLEET_LEADER_GRPC_PORT": "9999"})
    assert chosen.env["BENCHFLEET_LEADER_GRPC_PORT"] == "9999"
