"""Synthetic request bodies follow the model's signature, per datatype, reproducibly."""

from __future__ import annotations

import base64

import numpy as np
import orjson
import pytest

from common.wire.models import TensorSpec
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


def test_bodies_from_request_data_use_its_rows_for_every_wire() -> None:
    import numpy as np
    import orjson

    from common.wire.models import TensorSpec
    from follower.loadgen.bodies import build_bodies
    from protos import grpc_predict_v2_pb2 as pb

    rows = [np.full(4, float(i), dtype=np.float32) for i in range(3)]
    spec = [TensorSpec(name="input", datatype="FP32", shape=[-1, 4])]
    body = orjson.loads(build_bodies(spec, 2, seed=1, variants=1, samples={"input": rows})[0])
    data = body["inputs"][0]["data"]
    assert body["inputs"][0]["shape"] == [2, 4] and {data[0], data[4]} <= {0.0, 1.0, 2.0}
    assert data[:4] == [data[0]] * 4  # one whole sample per row
    raw = pb.ModelInferRequest.FromString(
        build_bodies(spec, 2, seed=1, variants=1, protocol="kserve-grpc", samples={"input": rows})[0]
    )
    assert np.array_equal(np.frombuffer(raw.raw_input_contents[0], "<f4"), np.asarray(data, dtype=np.float32))


def test_request_data_that_does_not_fit_names_the_input() -> None:
    import numpy as np
    import pytest

    from common.wire.models import TensorSpec
    from follower.loadgen.bodies import build_bodies

    spec = [TensorSpec(name="input", datatype="FP32", shape=[-1, 4])]
    with pytest.raises(ValueError, match="'input'.*shape"):
        build_bodies(spec, 1, seed=0, samples={"input": [np.zeros(5)]})
    with pytest.raises(ValueError, match="no field for input 'input'"):
        build_bodies(spec, 1, seed=0, samples={"other": [np.zeros(4)]})


def test_sample_images_feed_an_image_model_through_the_processor_registry(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import hashlib
    from datetime import UTC, datetime

    import pytest

    pytest.importorskip("skimage", reason="scikit-image (images extra) ships the sample images")
    from common.spec.job import DataRef
    from common.wire.models import ModelMeta, TensorSpec
    from follower.attempt.request_data import resolve_samples
    from follower.loadgen.bodies import build_bodies

    image = TensorSpec(name="x", datatype="FP32", shape=[-1, 3, 32, 32])
    model = ModelMeta(name="img", version="1", format="onnx", inputs=[image],
                      outputs=[TensorSpec(name="y", datatype="FP32", shape=[-1, 10])], sha256=hashlib.sha256(b"").hexdigest(),
                      size_bytes=0, created_at=datetime.now(UTC))  # fmt: skip
    samples = resolve_samples(DataRef(source="sample_images"), model, client=None, cache_dir=tmp_path)
    assert samples is not None and samples["x"][0].shape == (3, 32, 32)
    assert len(build_bodies(model.inputs, 2, seed=0, variants=2, samples=samples)) == 2
    with pytest.raises(ValueError, match="needs a preprocess or postprocess"):
        DataRef(source="sample_images", processing="server")  # refused in the spec, before any job exists
    with pytest.raises(ValueError, match="raw request data"):
        DataRef(source="synthetic", preprocess="image_imagenet", processing="server")
    # Server-side: the samples stay encoded images and travel as base64 text in a BYTES [N, 1] tensor.
    raw = resolve_samples(DataRef(source="sample_images", preprocess="image_imagenet", processing="server"), model,
                          client=None, cache_dir=tmp_path)  # fmt: skip
    assert raw is not None and isinstance(raw["x"][0], bytes) and raw["x"][0][:4] == b"\x89PNG"
    (body,) = build_bodies(model.inputs, 2, seed=0, variants=1, samples=raw)
    (entry,) = orjson.loads(body)["inputs"]
    assert (entry["name"], entry["datatype"], entry["shape"]) == ("x", "BYTES", [2, 1])
    assert base64.b64decode(entry["data"][0])[:4] == b"\x89PNG"


def test_row_bodies_send_the_rows_a_trace_names() -> None:
    from follower.loadgen.bodies import build_row_bodies

    spec = TensorSpec(name="x", datatype="FP32", shape=[-1, 2])
    samples = {"x": [np.array([float(k), -float(k)], dtype=np.float32) for k in range(4)]}
    bodies, index = build_row_bodies([spec], 2, samples, np.array([3, 0, 3, 1]))
    assert len(bodies) == 3 and index.tolist() == [2, 0, 2, 1]  # one body per distinct row
    sent = [orjson.loads(bodies[i])["inputs"][0]["data"] for i in index]
    assert sent[0] == [3.0, -3.0, 0.0, -0.0]  # row 3, then row 0 (wrapped) for the batch's second sample
    assert sent[1] == [0.0, -0.0, 1.0, -1.0]
    with pytest.raises(ValueError, match="rows up to 9"):
        build_row_bodies([spec], 1, samples, np.array([9]))
