"""Synthetic, seeded request bodies from a model's input signature (or from request data), encoded once before the
run by the protocol that carries them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from common.formats.datatypes import FLOAT_DATATYPES, INT_DATATYPES, V2_TO_NUMPY
from common.spec.target import DEFAULT_PROTOCOL, ProtocolName
from common.tensors import MAX_REQUEST_ELEMENTS
from common.wire.models import TensorSpec, request_elements
from follower.protocols import PROTOCOLS

# How many distinct bodies a run cycles through: enough that no cache sees one input, few enough to be cheap.
DEFAULT_VARIANTS = 16
# Request data by input name: arrays, or raw samples (bytes, text) that a server-side preprocessor reads.
Samples = Mapping[str, Sequence[Any]]


def resolve_shape(shape: Sequence[int], batch_size: int) -> list[int]:
    """A concrete shape: a dynamic first dimension is the batch, any other dynamic dimension becomes 1."""
    return [(batch_size if i == 0 else 1) if d < 0 else d for i, d in enumerate(shape)]


def synthetic_data(spec: TensorSpec, shape: Sequence[int], rng: np.random.Generator) -> list[object]:
    """Flat JSON-ready values of the spec's datatype: normal floats, small non-negative ints, bools, short strings."""
    n = int(np.prod(shape)) if len(shape) else 1
    dt = spec.datatype
    if dt in FLOAT_DATATYPES:
        # Through the target dtype and back, so the values are exactly representable in it (FP16 included).
        return rng.standard_normal(n).astype(V2_TO_NUMPY[dt]).astype(np.float64).tolist()
    if dt in INT_DATATYPES:
        # Small non-negative values fit every integer type and are safe as indices (token ids, classes).
        return rng.integers(0, min(100, int(np.iinfo(V2_TO_NUMPY[dt]).max) + 1), size=n).tolist()
    if dt == "BOOL":
        return rng.integers(0, 2, size=n).astype(bool).tolist()
    if dt == "BYTES":
        letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
        return ["".join(rng.choice(letters, size=8)) for _ in range(n)]
    raise ValueError(f"input {spec.name!r}: unsupported datatype {dt}")


def _is_raw(values: Sequence[object]) -> bool:
    """Raw request data (encoded images, text) kept for server-side preprocessing, not tensors."""
    first = values[0] if len(values) else None
    return isinstance(first, bytes | bytearray | str) or (isinstance(first, np.ndarray) and first.dtype.kind in "SUO")


def raw_entry(name: str, values: Sequence[object]) -> dict[str, object]:
    """A BYTES [N, 1] input of raw samples for a server-side preprocessor: binary as base64 text, text as is."""
    import base64

    data: list[object] = []
    for v in values:
        v = v.item() if isinstance(v, np.ndarray) else v
        data.append(base64.b64encode(bytes(v)).decode("ascii") if isinstance(v, bytes | bytearray) else str(v))
    return {"name": name, "shape": [len(data), 1], "datatype": "BYTES", "data": data}


def sample_entries(
    inputs: Sequence[TensorSpec],
    batch_size: int,
    samples: Samples,
    rng: np.random.Generator,
    rows: Sequence[int] | None = None,
) -> list[dict[str, object]]:
    """One request's inputs drawn from request data: `batch_size` samples (the same rows for every input) stacked.

    `rows` names the samples (a trace's per-request input); by default they are drawn with `rng`.
    """
    n = min(len(v) for v in samples.values())
    if rows is None:
        rows = rng.integers(0, n, size=batch_size).tolist()
    entries: list[dict[str, object]] = []
    for spec in inputs:
        if spec.name not in samples:
            raise ValueError(f"request data has no field for input {spec.name!r} (it has {sorted(samples)})")
        if _is_raw(samples[spec.name]):
            entries.append(raw_entry(spec.name, [samples[spec.name][r] for r in rows]))
            continue
        if spec.datatype not in V2_TO_NUMPY:
            raise ValueError(f"input {spec.name!r}: datatype {spec.datatype} cannot be fed from request data")
        batch = np.stack([np.asarray(samples[spec.name][r]) for r in rows]).astype(V2_TO_NUMPY[spec.datatype])
        if len(batch.shape) != len(spec.shape) or any(d != -1 and d != b for d, b in zip(spec.shape, batch.shape, strict=True)):
            raise ValueError(f"input {spec.name!r}: request data gives shape {list(batch.shape)}, the model takes {spec.shape}")
        entries.append({"name": spec.name, "shape": list(batch.shape), "datatype": spec.datatype, "data": batch.ravel().tolist()})
    return entries


def build_bodies(
    inputs: Sequence[TensorSpec],
    batch_size: int,
    seed: int,
    variants: int = DEFAULT_VARIANTS,
    protocol: ProtocolName = DEFAULT_PROTOCOL,
    samples: Samples | None = None,
) -> list[bytes]:
    """`variants` infer bodies for a batch of `batch_size`, reproducible for a seed, encoded as `protocol` encodes
    them (follower/protocols/). With `samples` (request data: input name → list of one-sample arrays) the rows are
    drawn from it instead of being synthetic.
    """
    if batch_size < 1:
        raise ValueError("batch_size must be >= 1")
    values = request_elements(inputs, batch_size)
    if values > MAX_REQUEST_ELEMENTS:  # checked at submission too; an endpoint's metadata is first seen here
        raise ValueError(
            f"a request of batch {batch_size} holds {values:,} values; a request may hold at most {MAX_REQUEST_ELEMENTS:,}"
        )
    variants = max(1, min(variants, MAX_REQUEST_ELEMENTS // max(values, 1)))  # all variants together within the bound
    rng = np.random.default_rng(seed)
    encoder = PROTOCOLS[protocol]
    bodies = []
    for _ in range(variants):
        entries = []
        if samples is not None:
            entries = sample_entries(inputs, batch_size, samples, rng)
        for spec in inputs if samples is None else ():
            shape = resolve_shape(spec.shape, batch_size)
            entries.append(
                {"name": spec.name, "shape": shape, "datatype": spec.datatype, "data": synthetic_data(spec, shape, rng)}
            )
        bodies.append(encoder.encode(entries))
    return bodies


def build_row_bodies(
    inputs: Sequence[TensorSpec],
    batch_size: int,
    samples: Samples,
    rows: np.ndarray,
    protocol: ProtocolName = DEFAULT_PROTOCOL,
) -> tuple[list[bytes], np.ndarray]:
    """Bodies for a trace's per-request inputs: (one body per distinct row, each request's index into them).

    The request naming row k sends samples k, k+1, ..., k+batch_size-1 (wrapping at the end of the data set).
    """
    n = min(len(v) for v in samples.values())
    distinct, body_index = np.unique(np.asarray(rows, dtype=np.int64), return_inverse=True)
    if len(distinct) and (distinct[0] < 0 or distinct[-1] >= n):
        raise ValueError(f"the trace names input rows up to {int(distinct[-1])}; the request data has {n} rows")
    rng = np.random.default_rng(0)  # unused: the rows are given
    encoder = PROTOCOLS[protocol]
    bodies = [
        encoder.encode(sample_entries(inputs, batch_size, samples, rng, rows=[(int(k) + j) % n for j in range(batch_size)]))
        for k in distinct
    ]
    return bodies, body_index.astype(np.int64)
