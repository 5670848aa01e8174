"""The model bundle: one zip holding the same model as ONNX and TorchScript plus its metadata (FLOPs, bytes, checks).

The leader only ever reads `model.onnx` (parsed, never run) and `meta.json` from it; followers pick the member their
backend serves. Reading is bounded so that a crafted zip cannot exhaust memory.
"""

from __future__ import annotations

import io
import json
import zipfile
from typing import Any

from common.formats.ziplimits import ArchiveTooLarge, check_claims, check_member

ONNX_MEMBER = "model.onnx"
TORCHSCRIPT_MEMBER = "model.pt"
META_MEMBER = "meta.json"
# A member larger than this is refused rather than inflated (zip bombs; common.formats.ziplimits bounds its ratio too).
MAX_MEMBER_BYTES = 1024**3


class BundleError(ValueError):
    """The bytes are not a usable benchfleet bundle."""


def write_bundle(members: dict[str, bytes], meta: dict[str, Any]) -> bytes:
    """A bundle zip of `members` (name → bytes) and `meta` as meta.json."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_STORED) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
        zf.writestr(META_MEMBER, json.dumps(meta, indent=2, sort_keys=True))
    return buf.getvalue()


def read_member(data: bytes, name: str, *, limit: int = MAX_MEMBER_BYTES) -> bytes:
    """One member's bytes; BundleError if the zip is broken, lacks it, or it is larger than `limit`."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as zf:
            try:
                info = zf.getinfo(name)
            except KeyError:
                raise BundleError(f"bundle has no {name}; members: {sorted(zf.namelist())[:20]}") from None
            check_claims(zf)
            check_member(info, limit)
            with zf.open(info) as fh:
                out = fh.read(limit + 1)
            if len(out) > limit:
                raise BundleError(f"bundle member {name} inflates past the limit of {limit} bytes")
            return out
    except ArchiveTooLarge as exc:
        raise BundleError(f"bundle {exc}") from None
    except (zipfile.BadZipFile, OSError, EOFError) as exc:
        raise BundleError(f"not a valid bundle zip: {exc}") from None


def read_meta(data: bytes) -> dict[str, Any]:
    """The bundle's meta.json as a dict."""
    try:
        meta = json.loads(read_member(data, META_MEMBER, limit=16 * 1024 * 1024))
    except json.JSONDecodeError as exc:
        raise BundleError(f"meta.json is not JSON: {exc}") from None
    if not isinstance(meta, dict):
        raise BundleError("meta.json must be an object")
    return meta
