"""Models on local disk, keyed by checksum: each is fetched from the leader once."""

from __future__ import annotations

import hashlib
from pathlib import Path

from common.wire.models import ModelMeta
from follower.link.leader_client import LeaderClient


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def fetch_model(client: LeaderClient, model: ModelMeta, cache_dir: Path) -> tuple[Path, bool]:
    """The local path of the model and whether it came from the cache (a corrupt cached copy is fetched again)."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    path = cache_dir / f"{model.sha256}.{model.format}"
    if path.exists() and _sha256(path) == model.sha256:
        return path, True
    client.download_model(model, path)
    return path, False
