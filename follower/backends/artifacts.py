"""Pick the file a backend serves out of what the model cache holds (a plain model file or a bundle)."""

from __future__ import annotations

import hashlib
from pathlib import Path

from common.formats.bundle import ONNX_MEMBER, TORCHSCRIPT_MEMBER, read_member
from common.wire.models import ModelMeta

_MEMBERS = {"onnx": ONNX_MEMBER, "torchscript": TORCHSCRIPT_MEMBER}


class MissingArtifact(RuntimeError):
    """The stored model has no form this backend can serve."""


def artifact(model_path: Path, model: ModelMeta, kind: str, workdir: Path) -> Path:
    """The path of the model in form `kind` (onnx, torchscript): the file itself, or the member extracted from a bundle."""
    model_path = Path(model_path)
    if model.format == kind:
        return model_path
    if model.format != "bundle" or kind not in _MEMBERS:
        raise MissingArtifact(f"model {model.ref} is stored as {model.format}; this backend needs {kind}")
    data = model_path.read_bytes()
    member = read_member(data, _MEMBERS[kind])
    # Keyed by content so that two models (or versions) never share an extracted file.
    digest = hashlib.sha256(member).hexdigest()[:16]
    out = Path(workdir) / "artifacts" / f"{model.name}-{digest}{Path(_MEMBERS[kind]).suffix}"
    if not out.exists():
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_suffix(".tmp")
        tmp.write_bytes(member)
        tmp.replace(out)
    return out
