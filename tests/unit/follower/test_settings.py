"""Follower settings are checked at start, with the field named: files that must exist, the work dir, labels."""

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


def test_a_relative_work_dir_is_made_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Model servers run from another directory (the sandbox's): a relative work dir once made their model path miss."""
    monkeypatch.chdir(tmp_path)
    settings = FollowerSettings(token="t" * 16, work_dir=Path("rel/work"))  # type: ignore[call-arg]
    assert settings.work_dir == tmp_path / "rel" / "work" and settings.jobs_dir.is_absolute()


def test_labels_come_from_json_and_bad_ones_are_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BENCHFLEET_FOLLOWER_LABELS", '{"zone": "a", "network": "25g"}')
    assert FollowerSettings(token="t" * 16).labels == {"zone": "a", "network": "25g"}  # type: ignore[call-arg]
    monkeypatch.setenv("BENCHFLEET_FOLLOWER_LABELS", '{"zone": "a b"}')
    with pytest.raises(ValidationError, match="labels"):
        FollowerSettings(token="t" * 16)  # type: ignore[call-arg]
