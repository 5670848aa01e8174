"""Synthetic request bodies follow the model's signature, per datatype, reproducibly."""

from __future__ import annotations

import numpy as np
import orjson
import pytest

from common.models import TensorSpec
from follower.loadgen.bodies import build_bodies, resolve_shape


def test_resolve_shape_batch_and_other_dynamic_dims() -> None:
    assert resolve_shape([-1, 3, -1, 5], 8) == [8, 3, 1, 5]
    assert resolve_shape([2, 4], 8) == [2, 4]


@pytest.mark.parametrize(
    ("datatype", "check"),
    [
        ("FP32", lambda v: all(isinstance(x, float) for x in v) and np.float32(v[0]) == v[0]),
        ("FP16", lambda v: all(float(np.float16(x)) == x for x in v)),
        ("FP64", lambda v: all(isinstance(x, float) for x in v)),
        ("INT64", lambda v: all(isinstance(x, int) and 0 <= x < 100 for x in v)),
        ("INT8", lambda v: all(isinstance(x, int) and 0 <= x <= 127 for x in v)),
        ("UINT8", lambda v: all(isinstance(x, int) and 0 <= x <= 255 for x in v)),
        ("BOOL", lambda v: all(isinstance(x, bool) for x in v)),
        ("BYTES", lambda v: all(isinstance(x, str) and len(x) == 8 for x in v)),
    ],
)
def test_values_fit_the_datatype(datatype: str, check: object) -> None:
    spec = TensorSpec(name="x", datatype=datatype, shape=[-1, 3])  # type: ignore[arg-type]
    (body,) = build_bodies([spec], batch_size=4, seed=1, variants=1)
    (entry,) = orjson.loads(body)["inputs"]
    assert entry["name"] == "x"
    assert entry["datatype"] == datatype
    assert entry["shape"] == [4, 3]
    assert len(entry["data"]) == 12
    assert check(entry["data"])  # type: ignore[operator]


def test_every_input_is_present_and_bodies_are_seeded() -> None:
    inputs = [TensorSpec(name="ids", datatype="INT64", shape=[-1, 16]), TensorSpec(name="mask", datatype="BOOL", shape=[-1, 16])]
    a = build_bodies(inputs, batch_size=2, seed=5, variants=4)
    assert a == build_bodies(inputs, batch_size=2, seed=5, variants=4)
    assert a != build_bodies(inputs, batch_size=2, seed=6, variants=4)
    assert len(set(a)) == 4  # the variants really differ
    names = [e["name"] for e in orjson.loads(a[0])["inputs"]]
    assert names == ["ids", "mask"]


def test_batch_size_must_be_positive() -> None:
    with pytest.raises(ValueError):
        build_bodies([TensorSpec(name="x", datatype="FP32", shape=[-1])], batch_size=0, seed=0)
