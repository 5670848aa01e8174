"""Target secrets sealed at rest: the value is not in the stored bytes and opens only with its key and its name."""

from __future__ import annotations

import pytest

from leader.secretbox import SecretBox

KEY = "k" * 32


def test_a_sealed_value_opens_with_its_key_and_binding_only() -> None:
    box = SecretBox(KEY)
    sealed = box.seal("Bearer sk-very-secret", binding="team-a/api")
    assert b"sk-very-secret" not in sealed
    assert box.open(sealed, binding="team-a/api") == "Bearer sk-very-secret"
    assert box.seal("same", binding="t/n") != box.seal("same", binding="t/n")  # a fresh nonce each time
    with pytest.raises(ValueError, match="does not open"):
        box.open(sealed, binding="team-b/api")  # copied onto another team's secret
    with pytest.raises(ValueError, match="does not open"):
        SecretBox("x" * 32).open(sealed, binding="team-a/api")  # another key
    tampered = sealed[:-1] + bytes([sealed[-1] ^ 1])
    with pytest.raises(ValueError):
        box.open(tampered, binding="team-a/api")
