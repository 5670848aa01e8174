"""Target secrets sealed at rest: AES-256-GCM under a key derived (HKDF-SHA256) from the leader's secret_key
setting, each value with its own random nonce and bound to its name and team (a sealed value copied onto another
secret does not open). Nothing here logs a value."""

from __future__ import annotations

import os

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

NONCE_BYTES = 12
INFO = b"benchfleet target secrets v1"


class SecretBox:
    """Seals and opens secret values with one key (from the settings' secret_key, at least 24 characters)."""

    def __init__(self, key_material: str) -> None:
        key = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=INFO).derive(key_material.encode())
        self._aead = AESGCM(key)

    def seal(self, value: str, *, binding: str) -> bytes:
        """nonce + ciphertext of `value`, authenticated together with `binding` (the secret's team and name)."""
        nonce = os.urandom(NONCE_BYTES)
        return nonce + self._aead.encrypt(nonce, value.encode(), binding.encode())

    def open(self, sealed: bytes, *, binding: str) -> str:
        """The value sealed under `binding`; ValueError if the key or the binding differ, or the bytes were changed."""
        try:
            return self._aead.decrypt(sealed[:NONCE_BYTES], sealed[NONCE_BYTES:], binding.encode()).decode()
        except InvalidTag:
            raise ValueError("the sealed value does not open with this key (was secret_key changed?)") from None
