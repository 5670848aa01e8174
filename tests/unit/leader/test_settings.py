"""Leader settings: required tokens, minimum length, env names, no secrets in errors."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from leader.settings import LeaderSettings

GOOD = {"admin_token": "a" * 16, "follower_token": "f" * 16}


def test_tokens_are_required(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("BENCHFLEET_LEADER_ADMIN_TOKEN", raising=False)
    monkeypatch.delenv("BENCHFLEET_LEADER_FOLLOWER_TOKEN", raising=False)
    with pytest.raises(ValidationError):
        LeaderSettings()  # type: ignore[call-arg]


def test_short_token_is_refused_without_echoing_it() -> None:
    with pytest.raises(ValidationError) as info:
        LeaderSettings(admin_token="tooshort-secret", follower_token="f" * 16)
    assert "admin_token" in str(info.value)
    assert "tooshort-secret" not in str(info.value)


def test_reads_prefixed_and_shared_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BENCHFLEET_LEADER_ADMIN_TOKEN", "a" * 20)
    monkeypatch.setenv("BENCHFLEET_LEADER_FOLLOWER_TOKEN", "f" * 20)
    monkeypatch.setenv("BENCHFLEET_MONGO_URI", "mongodb://db.example:27017/")
    monkeypatch.setenv("BENCHFLEET_REDIS_URL", "redis://broker.example:6379/1")
    monkeypatch.setenv("BENCHFLEET_LEADER_PORT", "9100")
    settings = LeaderSettings()  # type: ignore[call-arg]
    assert settings.mongo_uri == "mongodb://db.example:27017/"
    assert settings.redis_url == "redis://broker.example:6379/1"
    assert settings.port == 9100
    assert settings.admin_token.get_secret_value() == "a" * 20
    assert "a" * 20 not in repr(settings)


def test_prefixed_env_wins_over_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("BENCHFLEET_MONGO_URI", raising=False)
    monkeypatch.setenv("BENCHFLEET_LEADER_MONGO_URI", "mongodb://leader-only:1/")
    assert LeaderSettings(**GOOD).mongo_uri == "mongodb://leader-only:1/"


def test_explicit_values() -> None:
    settings = LeaderSettings(mongo_uri="mongodb://x/", redis_url="redis://y/0", missing_after_s=1.0, **GOOD)
    assert (settings.mongo_uri, settings.redis_url, settings.missing_after_s) == ("mongodb://x/", "redis://y/0", 1.0)
    assert settings.max_upload_bytes == 512 * 1024 * 1024
    assert settings.max_body_bytes == 1024 * 1024


def test_tls_needs_its_certificate_and_key_together(tmp_path) -> None:  # type: ignore[no-untyped-def]
    cert, key = tmp_path / "c.pem", tmp_path / "k.pem"
    cert.write_text("cert")
    with pytest.raises(ValidationError, match="tls_certfile and tls_keyfile go together"):
        LeaderSettings(**GOOD, tls_certfile=cert)
    with pytest.raises(ValidationError, match="tls_keyfile: no file at"):
        LeaderSettings(**GOOD, tls_certfile=cert, tls_keyfile=key)
    key.write_text("key")
    assert LeaderSettings(**GOOD, tls_certfile=cert, tls_keyfile=key).tls_keyfile == key


def test_an_empty_secret_key_is_unset_and_a_short_one_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """Compose and the Helm chart pass BENCHFLEET_LEADER_SECRET_KEY through, empty when the operator gave none."""
    monkeypatch.setenv("BENCHFLEET_LEADER_SECRET_KEY", "")
    assert LeaderSettings(**GOOD).secret_key is None  # type: ignore[arg-type]
    monkeypatch.setenv("BENCHFLEET_LEADER_SECRET_KEY", "k" * 32)
    assert LeaderSettings(**GOOD).secret_key.get_secret_value() == "k" * 32  # type: ignore[arg-type, union-attr]
    monkeypatch.setenv("BENCHFLEET_LEADER_SECRET_KEY", "short-key")
    with pytest.raises(ValidationError) as info:
        LeaderSettings(**GOOD)  # type: ignore[arg-type]
    assert "secret_key" in str(info.value) and "short-key" not in str(info.value)


@pytest.mark.parametrize(("env", "lookahead"), [(None, 1), ("3", 3), ("0", 0), ("off", None), ("None", None)])
def test_placement_lookahead_is_one_by_default_and_off_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, env: str | None, lookahead: int | None
) -> None:
    """The fair share between teams is on by default; `off` gives back the two-tier scheduler (every job sent at once)."""
    if env is None:
        monkeypatch.delenv("BENCHFLEET_LEADER_PLACEMENT_LOOKAHEAD", raising=False)
    else:
        monkeypatch.setenv("BENCHFLEET_LEADER_PLACEMENT_LOOKAHEAD", env)
    assert LeaderSettings(**GOOD).placement_lookahead == lookahead  # type: ignore[arg-type]


def test_a_placement_lookahead_that_is_not_a_count_names_the_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BENCHFLEET_LEADER_PLACEMENT_LOOKAHEAD", "some")
    with pytest.raises(ValidationError) as info:
        LeaderSettings(**GOOD)  # type: ignore[arg-type]
    assert "placement_lookahead" in str(info.value)
