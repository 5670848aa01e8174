"""Conversion, canonical models, Triton configs, signature checks and processors (no servers)."""

from __future__ import annotations

import zipfile
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest

from common.formats.bundle import BundleError, read_member, read_meta, write_bundle
from common.formats.signature import input_mismatches
from common.spec.parse import parse_spec
from common.spec.server import DynamicBatching, ServerOptions
from common.wire.models import ModelMeta, TensorSpec
from follower.convert.check import ConversionMismatch, compare, require
from follower.convert.triton_repo import config_pbtxt
from follower.servers.processing import get_processor, tokenize, top_k

torch = pytest.importorskip("torch", reason="the torch extra is not installed (scripts/setup.sh installs it)")


def _meta(inputs: list[TensorSpec], fmt: str = "bundle") -> ModelMeta:
    out = [TensorSpec(name="output", datatype="FP32", shape=[-1, 10])]
    return ModelMeta(
        name="m", version="1", format=fmt, inputs=inputs, outputs=out, sha256="0" * 64, size_bytes=1, created_at=datetime.now(UTC)
    )


@pytest.mark.parametrize("kind", ["fc", "conv", "lstm", "attention"])
def test_canonical_models_export_and_pass_their_checks(kind: str) -> None:
    from follower.convert.canonical import CanonicalSpec, generate

    bundle, meta = generate(CanonicalSpec(kind, depth=1, width=8, input_size=6))  # type: ignore[arg-type]
    assert {c["target"] for c in meta["checks"]} == {"onnx", "torchscript"}
    assert all(c["passed"] and c["max_abs_diff"] <= c["atol"] + c["rtol"] for c in meta["checks"])
    assert meta["cost_per_inference"]["flops"] > 0 and meta["cost_per_inference"]["bytes"] > 0
    assert read_meta(bundle)["spec"]["kind"] == kind
    assert read_member(bundle, "model.onnx")[:2] and read_member(bundle, "model.pt")[:2] == b"PK"


def test_fc_cost_is_the_matmul_count() -> None:
    from follower.convert.canonical import CanonicalSpec, cost

    c = cost(CanonicalSpec("fc", depth=2, width=32, input_size=16))
    assert c["flops"] == 2 * (16 * 32 + 2 * 32 * 32 + 32 * 10)
    assert c["params"] == (16 * 32 + 32) + 2 * (32 * 32 + 32) + (32 * 10 + 10)


def test_onnx_external_data_export_is_checked(tmp_path: Path) -> None:
    from follower.convert.canonical import CanonicalSpec, build
    from follower.convert.torch_export import to_onnx

    module, example = build(CanonicalSpec("fc", depth=1, width=8, input_size=4))
    check = to_onnx(module, example, tmp_path / "m.onnx", external_data=True)
    assert check.passed and (tmp_path / "m.onnx.data").stat().st_size > 0


def test_a_wrong_conversion_is_refused() -> None:
    good = [np.ones((2, 3), dtype=np.float32)]
    check = compare("onnx", good, [good[0] + 1e-2])
    assert not check.passed and check.max_abs_diff == pytest.approx(1e-2)
    with pytest.raises(ConversionMismatch, match="max abs"):
        require(check)
    assert compare("onnx", good, [good[0].reshape(3, 2)]).passed is False


def test_triton_config_with_and_without_dynamic_batching() -> None:
    model = _meta([TensorSpec(name="input", datatype="FP32", shape=[-1, 16])])
    off = config_pbtxt(model, ServerOptions(instances=2), onnxruntime_backend=False)
    assert 'backend: "python"' in off and "dynamic_batching" not in off and "count: 2" in off
    assert 'name: "input" data_type: TYPE_FP32 dims: [ 16 ]' in off
    on = config_pbtxt(
        model,
        ServerOptions(dynamic_batching=DynamicBatching(max_batch_size=8, preferred_batch_sizes=[4, 8], max_queue_delay_us=300)),
        onnxruntime_backend=True,
    )
    assert 'platform: "onnxruntime_onnx"' in on and "max_batch_size: 8" in on
    assert "preferred_batch_size: [ 4, 8 ] max_queue_delay_microseconds: 300" in on


def test_signature_mismatches_name_the_difference() -> None:
    actual = [TensorSpec(name="input", datatype="FP32", shape=[-1, 16])]
    assert input_mismatches([{"name": "input", "datatype": "FP32", "shape": [-1, 16]}], actual) == []
    problems = input_mismatches([{"name": "input", "datatype": "FP32", "shape": [-1, 3, 224, 224]}], actual)
    assert problems == ["input 'input': shape [-1, 16], expected [-1, 3, 224, 224]"]
    assert "missing" in input_mismatches([{"name": "ids", "datatype": "INT64", "shape": [-1, 8]}], actual)[0]


def test_preflight_refuses_a_bundle_that_does_not_match_the_job(tmp_path: Path) -> None:
    from follower.convert.canonical import CanonicalSpec, generate
    from follower.convert.signature import SignatureMismatch, check_before_serving

    bundle, meta = generate(CanonicalSpec("fc", depth=1, width=8, input_size=4))
    path = tmp_path / "m.zip"
    path.write_bytes(bundle)
    model = _meta([TensorSpec(**meta["inputs"][0])])
    ok = parse_spec({"name": "j", "model": "m:1", "load": {"rate": 10}, "inputs": meta["inputs"]})
    check_before_serving(ok, model, path)
    bad = parse_spec(
        {"name": "j", "model": "m:1", "load": {"rate": 10}, "inputs": [{"name": "input", "datatype": "FP32", "shape": [-1, 5]}]}
    )
    with pytest.raises(SignatureMismatch, match="shape"):
        check_before_serving(bad, model, path)
    lying = _meta([TensorSpec(name="input", datatype="INT64", shape=[-1, 4])])
    with pytest.raises(SignatureMismatch, match="stored signature"):
        check_before_serving(ok, lying, path)


def test_bundle_reading_is_bounded(tmp_path: Path) -> None:
    bundle = write_bundle({"model.onnx": b"x" * 100}, {"a": 1})
    with pytest.raises(BundleError, match="over the limit"):
        read_member(bundle, "model.onnx", limit=10)
    with pytest.raises(BundleError, match="no model.pt"):
        read_member(bundle, "model.pt")
    with pytest.raises(BundleError, match="not a valid bundle"):
        read_member(b"not a zip", "model.onnx")
    assert zipfile.is_zipfile(__import__("io").BytesIO(bundle))


def test_processors() -> None:
    best = top_k(np.array([[0.0, 5.0, 1.0]]), k=2, labels=["cat", "dog", "fox"])
    assert [b["label"] for b in best[0]] == ["dog", "fox"] and best[0][0]["score"] > 0.9
    ids = tokenize("Hello world hello", length=5)
    assert ids.dtype == np.int64 and ids[0] == ids[2] != 0 and list(ids[3:]) == [0, 0]
    with pytest.raises(ValueError, match="image_imagenet"):
        get_processor("nope")


def test_sample_images_come_from_scikit_image() -> None:
    pytest.importorskip("skimage", reason="scikit-image (the images extra) is not installed")
    from follower.servers.processing import sample_images

    batch = sample_images(3, size=32)
    assert batch.shape == (3, 3, 32, 32) and batch.dtype == np.float32
    assert not np.allclose(batch[0], batch[1])  # distinct pictures, not one repeated


def test_keras_to_savedmodel_is_checked_against_the_source(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import numpy as np

    from follower.convert.savedmodel import keras_to_savedmodel, tensorflow_available, zip_savedmodel

    ok, why = tensorflow_available()
    if not ok:
        pytest.skip(why)
    import tensorflow as tf

    model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(3)])
    example = np.random.default_rng(0).standard_normal((2, 4)).astype(np.float32)
    check = keras_to_savedmodel(model, tmp_path / "sm", example)
    assert check.passed and check.target == "savedmodel"
    assert b"saved_model.pb" in zip_savedmodel(tmp_path / "sm")


@pytest.mark.parametrize("elem_type", ["UINT32", "UINT64", "INT8"])
def test_preflight_reads_every_kserve_datatype_as_the_leader_does(tmp_path: Path, elem_type: str) -> None:
    """The follower's pre-flight and the leader's upload read one signature (common.formats.onnx_signature): a UINT32 model
    was once read as BYTES here and refused as a mismatch."""
    from onnx import TensorProto

    from common.formats.onnx_signature import read_signature
    from follower.convert.signature import check_before_serving
    from tests.unit.leader.onnx_models import identity_model

    data = identity_model(elem_type=getattr(TensorProto, elem_type), dims=("batch", 4))
    path = tmp_path / "m.onnx"
    path.write_bytes(data)
    inputs, _ = read_signature(data)
    assert inputs == [TensorSpec(name="x", datatype=elem_type, shape=[-1, 4])]
    model = _meta(inputs, "onnx")
    check_before_serving(parse_spec({"name": "j", "model": "m:1", "load": {"rate": 10}}), model, path)
