"""A canonical bundle's hyper-parameters, read from its meta.json at upload (JSON only: nothing is executed here)."""

from __future__ import annotations

import json
from typing import Any

from pydantic import ValidationError

from common.errors import InvalidSpec
from common.formats.bundle import META_MEMBER, BundleError, read_member
from common.wire.models import CanonicalParams

# meta.json is a few KiB; anything near this is not a generator's output and is refused rather than parsed.
MAX_META_BYTES = 1024 * 1024


def canonical_params(data: bytes) -> CanonicalParams | None:
    """The bundle's canonical parameters; None when it has no meta.json or the meta has no `spec` (not canonical).

    A meta.json that is present but malformed (not JSON, oversized, a bad `spec`) is refused naming `file`.
    """
    try:
        raw = read_member(data, META_MEMBER, limit=MAX_META_BYTES)
    except BundleError as exc:
        if "has no" in str(exc):
            return None
        raise InvalidSpec(str(exc), field="file") from None
    try:
        meta = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise InvalidSpec(f"meta.json is not JSON: {exc}", field="file") from None
    if not isinstance(meta, dict):
        raise InvalidSpec("meta.json must be an object", field="file")
    spec = meta.get("spec")
    if spec is None:
        return None
    cost: Any = meta.get("cost_per_inference") or {}
    if not isinstance(spec, dict) or not isinstance(cost, dict):
        raise InvalidSpec("meta.json: spec and cost_per_inference must be objects", field="file")
    try:
        return CanonicalParams.model_validate(
            {
                "kind": spec.get("kind"),
                "depth": spec.get("depth"),
                "width": spec.get("width"),
                "input_size": spec.get("input_size"),
                "flops": cost.get("flops"),
                "bytes": cost.get("bytes"),
            }
        )
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise InvalidSpec(f"meta.json spec.{where}: {first['msg']}", field="file") from None
