"""Every backend live on the same canonical model: comparable results, Triton dynamic batching, no orphan servers."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest

from common.spec.grid import expand
from common.spec.parse import parse_spec
from common.wire.models import ModelMeta
from follower.backends import get_backend
from follower.backends.tfserving import find_tfserving
from follower.backends.triton import find_triton, why_no_triton
from follower.point.context import ServerRun
from follower.point.runner import run_backend

pytestmark = pytest.mark.integration
torch = pytest.importorskip("torch", reason="the torch extra is not installed (scripts/setup.sh installs it)")


@pytest.fixture(scope="module")
def canon(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, ModelMeta]:
    from follower.convert.canonical import CanonicalSpec, generate, local_model

    bundle, meta = generate(CanonicalSpec("fc", depth=2, width=32, input_size=16))
    path = tmp_path_factory.mktemp("canon") / "canon.zip"
    path.write_bytes(bundle)
    model = local_model(bundle, meta, "canon")
    return path, model


def _points(backends: list[str], rate: float = 40, duration: float = 1.0, server: dict[str, Any] | None = None) -> list:
    spec = parse_spec(
        {
            "name": "live",
            "model": "canon:1",
            "backends": backends,
            "batch_sizes": [1],
            "load": {"rate": rate, "duration": duration, "warmup": 0.3},
            "server": server or {},
        }
    )
    return expand(spec)


async def _collect(backend: str, points: list, canon: tuple[Path, ModelMeta], workdir: Path) -> list:
    path, model = canon
    return [r async for r in run_backend(backend, points, ServerRun(model=model, model_path=path, workdir=workdir, slo=None))]


def _available(name: str) -> str | None:
    if name == "triton" and find_triton() is None:
        return why_no_triton()
    return None


@pytest.mark.parametrize("backend", ["onnxruntime", "torchscript", "triton"])
def test_same_model_on_each_backend_gives_comparable_rows(backend: str, canon: tuple[Path, ModelMeta], tmp_path: Path) -> None:
    if reason := _available(backend):
        pytest.skip(reason)
    results = asyncio.run(_collect(backend, _points([backend]), canon, tmp_path))
    assert len(results) == 1
    r = results[0]
    assert r.point.backend == backend and r.errors == 0 and r.ok == r.requests > 0, r.error_sample
    assert r.latency_ms is not None and 0 < r.latency_ms.p50 < 1000
    assert r.cold_start is not None and r.cold_start.to_ready_s > 0
    assert r.environment.backend_version


def test_triton_dynamic_batching_merges_requests(canon: tuple[Path, ModelMeta], tmp_path: Path) -> None:
    if reason := _available("triton"):
        pytest.skip(reason)
    path, model = canon
    seen: dict[str, dict[str, int]] = {}
    for label, server in {"off": {}, "on": {"dynamic_batching": {"max_batch_size": 16, "max_queue_delay_us": 20000}}}.items():
        points = _points(["triton"], rate=150, duration=1.0, server=server)
        backend = get_backend("triton", server=points[0].server)
        backend.start(path, model, tmp_path / label)
        try:
            backend.wait_ready(60)
            from follower.point.context import PointContext
            from follower.point.measure import measure_point

            run = ServerRun(model=model, model_path=path, workdir=tmp_path / label)
            ctx = PointContext(run=run, backend=backend, endpoint=backend.serves(model), backend_version=backend.version())
            result = asyncio.run(measure_point(points[0], ctx))
            assert result.ok > 0
            stats = backend.stats()["model_stats"][0]
            seen[label] = {"inferences": int(stats["inference_count"]), "executions": int(stats["execution_count"])}
            assert backend.stats().get("metrics", {}).get("nv_inference_request_success", 0) > 0
        finally:
            backend.stop()
    # Without batching every request is its own execution; with a 20 ms window, several share one.
    assert seen["off"]["executions"] == seen["off"]["inferences"]
    assert seen["on"]["executions"] < seen["on"]["inferences"] * 0.8, seen


def test_no_server_outlives_a_cancelled_job(canon: tuple[Path, ModelMeta], tmp_path: Path) -> None:
    backends = ["onnxruntime", "torchscript"] + ([] if _available("triton") else ["triton"])
    pids: list[int] = []

    async def main() -> None:
        for name in backends:
            started = asyncio.Event()
            import follower.point.runner as runner

            original = runner.get_backend

            def spy(*args: Any, original: Any = original, started: asyncio.Event = started, **kwargs: Any) -> Any:
                backend = original(*args, **kwargs)
                start = backend.start

                def start_and_note(*a: Any) -> None:
                    start(*a)
                    pids.append(backend.process.pid)
                    started.set()

                backend.start = start_and_note  # type: ignore[method-assign]
                return backend

            runner.get_backend = spy
            try:
                task = asyncio.create_task(_collect(name, _points([name], duration=30.0), canon, tmp_path / name))
                await asyncio.wait_for(started.wait(), 60)
                await asyncio.sleep(1.5)  # mid-run: the server is up and load is flowing
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task
            finally:
                runner.get_backend = original

    asyncio.run(main())
    assert len(pids) == len(backends)
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.killpg(pid, 0)  # the whole process group is gone, not just its leader


def test_tfserving_live(tmp_path: Path) -> None:
    """A real TF Serving serves a SavedModel exported here from a Keras model; a point against it answers every request.
    Runs where the binary and TensorFlow (to make the SavedModel) both are; skips naming the one that is missing."""
    import hashlib
    from datetime import UTC, datetime

    import numpy as np

    from common.wire.models import TensorSpec
    from follower.convert.savedmodel import keras_to_savedmodel, tensorflow_available, zip_savedmodel

    if find_tfserving() is None:
        pytest.skip("tensorflow_model_server is not on PATH (no binary can be installed here; use the compose image)")
    ok, why = tensorflow_available()
    if not ok:
        pytest.skip(why)
    import tensorflow as tf

    keras = tf.keras.Sequential([tf.keras.Input((16,)), tf.keras.layers.Dense(4)])
    example = np.random.default_rng(0).standard_normal((2, 16)).astype(np.float32)
    assert keras_to_savedmodel(keras, tmp_path / "sm", example).passed
    signature = tf.saved_model.load(str(tmp_path / "sm")).signatures["serving_default"]
    ((input_name, _),) = signature.structured_input_signature[1].items()
    output_name = next(iter(signature.structured_outputs))
    path = tmp_path / "keras.zip"
    path.write_bytes(zip_savedmodel(tmp_path / "sm"))
    model = ModelMeta(
        name="keras",
        version="1",
        format="savedmodel",
        inputs=[TensorSpec(name=input_name, datatype="FP32", shape=[-1, 16])],
        outputs=[TensorSpec(name=output_name, datatype="FP32", shape=[-1, 4])],
        sha256=hashlib.sha256(path.read_bytes()).hexdigest(),
        size_bytes=path.stat().st_size,
        created_at=datetime.now(UTC),
    )
    (result,) = asyncio.run(_collect("tfserving", _points(["tfserving"]), (path, model), tmp_path / "run"))
    assert result.point.backend == "tfserving" and result.errors == 0 and result.ok == result.requests > 0, result.error_sample
    assert result.latency_ms is not None and result.environment.backend_version
