"""The signature of an uploaded model: read from its ONNX graph where it has one, else as declared; never run."""

from __future__ import annotations

import json

from pydantic import ValidationError

from common.errors import InvalidSpec, field_errors
from common.formats.bundle import ONNX_MEMBER, BundleError, read_member
from common.formats.onnx_signature import read_signature
from common.wire.models import TensorSpec


def model_signature(model_format: str, data: bytes, declared: str | None) -> tuple[list[TensorSpec], list[TensorSpec]]:
    """The signature of an upload: parsed from ONNX (plain or a bundle's member), else the declared JSON.

    TorchScript and SavedModel files are never opened on the leader (loading them can run code), so their signature
    comes from the `signature` form field: {"inputs": [...], "outputs": [...]} in ModelMeta form.
    """
    if model_format == "onnx":
        return read_signature(data)
    if model_format == "bundle":
        try:
            return read_signature(read_member(data, ONNX_MEMBER))
        except BundleError as exc:
            raise InvalidSpec(str(exc), field="file") from None
    if not declared:
        raise InvalidSpec(f"a {model_format} upload needs its signature declared (inputs and outputs)", field="signature")
    try:
        doc = json.loads(declared)
        inputs = [TensorSpec.model_validate(t) for t in doc["inputs"]]
        outputs = [TensorSpec.model_validate(t) for t in doc["outputs"]]
    except ValidationError as exc:
        first = field_errors(exc)[0]
        raise InvalidSpec(f"{first['field']}: {first['message']}", field="signature") from None
    except (ValueError, KeyError, TypeError, RecursionError) as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise InvalidSpec(f"must be JSON {{'inputs': [...], 'outputs': [...]}}: {reason}", field="signature") from None
    if not inputs or not outputs:
        raise InvalidSpec("needs at least one input and one output", field="signature")
    return inputs, outputs
