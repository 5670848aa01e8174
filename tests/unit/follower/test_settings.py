"""Follower settings that name files are checked at start, with the field named."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from follower.settings import FollowerSettings


def test_the_leader_ca_file_must_exist(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="leader_ca_file"):
        FollowerSettings(token="t" * 16, leader_ca_file=tmp_path / "missing.pem")  # type: ignore[call-arg]
    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    assert FollowerSettings(token="t" * 16, leader_ca_file=ca).leader_ca_file == ca  # type: ignore[call-arg]
