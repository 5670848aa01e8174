"""Serving backends through the whole system: one YAML job on onnxruntime, torchscript and Triton, and Triton's dynamic
batching on vs off, leader → follower → stored results.

The model is the canonical generator's bundle (ONNX + TorchScript), uploaded like any user's model. Triton is the real
binary (on PATH, or extracted by scripts/install_triton.sh); without one these tests skip and say why.
"""

from __future__ import annotations

import pytest

from benchfleet.client import BenchfleetClient
from common.wire.jobs import JobResults
from follower.backends.triton import find_triton, why_no_triton
from tests.e2e.test_walking_skeleton import _wait_done

pytestmark = pytest.mark.e2e
pytest.importorskip("torch", reason="the torch extra is not installed (scripts/setup.sh installs it)")
if find_triton() is None:
    pytest.skip(f"Triton is not installed here: {why_no_triton()}", allow_module_level=True)


@pytest.fixture(scope="module")
def canon(fleet) -> str:  # type: ignore[no-untyped-def]
    from follower.convert.canonical import CanonicalSpec, generate

    fleet.env["BENCHFLEET_FOLLOWER_METRICS_PORT"] = "-1"
    fleet.start_follower("backends-e2e")
    bundle, _ = generate(CanonicalSpec("fc", depth=2, width=32, input_size=16))
    with fleet.client() as client:
        return client.upload_model(bundle, name="canon-e2e", version="1", format="bundle").ref


def _run(client: BenchfleetClient, yaml: str) -> JobResults:
    job = client.submit_yaml(yaml)
    return _wait_done(client, job.id, timeout_s=180)


def test_one_job_on_three_backends_gives_comparable_rows(fleet, canon: str) -> None:  # type: ignore[no-untyped-def]
    with fleet.client() as client:
        follower = next(f for f in client.followers() if f.info.follower_id == "backends-e2e")
        assert {"onnxruntime", "torchscript", "triton"} <= set(follower.info.backends)
        results = _run(client, f"""
name: three-backends
model: {canon}
backends: [onnxruntime, torchscript, triton]
batch_sizes: [1]
load: {{allow_short: true, pattern: poisson, rate: 50, duration: 1s, warmup: 0.3s}}
""")
    rows = {r.point.backend: r for r in results.points}
    assert set(rows) == {"onnxruntime", "torchscript", "triton"}
    for backend, r in rows.items():
        # Same point on each: same batch, rate, duration and seed schedule length; every request answered.
        assert (r.point.batch_size, r.point.rate, r.point.duration_s) == (1, 50, 1.0), backend
        assert r.errors == 0 and r.ok == r.requests > 0, (backend, r.error_sample)
        assert r.latency_ms is not None and r.latency_ms.p50 > 0, backend
        assert r.cold_start is not None and r.cold_start.to_ready_s > 0, backend
        assert r.environment.backend_version, backend
        assert r.server_stats is not None and r.server_stats.inferences >= r.ok, backend
    assert len({r.requests for r in rows.values()}) == 1, "the same seeded schedule was offered to every backend"
    assert rows["triton"].environment.backend_version.startswith("triton")


def test_triton_dynamic_batching_on_vs_off_shows_in_the_stored_result(fleet, canon: str) -> None:  # type: ignore[no-untyped-def]
    load = "{pattern: poisson, rate: 150, duration: 1.5s, warmup: 0.3s, allow_short: true}"
    stored = {}
    with fleet.client() as client:
        for label, server in {"off": "{}", "on": "{dynamic_batching: {max_batch_size: 16, max_queue_delay_us: 20000}}"}.items():
            results = _run(client, f"""
name: triton-batching-{label}
model: {canon}
backends: [triton]
batch_sizes: [1]
load: {load}
server: {server}
""")
            (row,) = results.points
            assert row.errors == 0 and row.ok > 0, row.error_sample
            assert row.server_stats is not None
            stored[label] = row
    off, on = stored["off"].server_stats, stored["on"].server_stats
    assert off is not None and on is not None
    # Off: each request is its own execution. On: a 20 ms window merges several requests into one run, and they wait
    # for it in Triton's queue.
    assert off.executions == off.inferences and off.mean_batch == 1.0, off
    assert on.mean_batch is not None and on.mean_batch > 1.5, on
    assert on.queue_ms_mean is not None and off.queue_ms_mean is not None and on.queue_ms_mean > off.queue_ms_mean, (on, off)
    assert stored["on"].latency_ms is not None and stored["off"].latency_ms is not None
    print(f"triton batching off: {off} p50 {stored['off'].latency_ms.p50:.2f} ms; "
          f"on: {on} p50 {stored['on'].latency_ms.p50:.2f} ms")


def test_uploaded_request_data_feeds_the_job(fleet, canon: str) -> None:  # type: ignore[no-untyped-def]
    import io

    import httpx
    import numpy as np

    buf = io.BytesIO()
    np.savez(buf, input=np.random.default_rng(0).standard_normal((32, 16)).astype(np.float32))
    headers = {"Authorization": f"Bearer {fleet.admin_token}"}
    upload = httpx.post(f"{fleet.url}/api/v1/data", headers=headers, data={"name": "canon-inputs", "format": "npz"},
                        files={"file": ("inputs.npz", buf.getvalue(), "application/octet-stream")})  # fmt: skip
    assert upload.status_code == 201, upload.text
    data_id = upload.json()["id"]
    with fleet.client() as client:
        results = _run(client, f"""
name: with-data
model: {canon}
backends: [onnxruntime]
batch_sizes: [2]
load: {{allow_short: true, pattern: constant, rate: 30, duration: 0.5s, warmup: 0s}}
data: {{source: upload, id: {data_id}}}
""")
    (row,) = results.points
    assert row.errors == 0 and row.ok == row.requests > 0, row.error_sample
    # The follower fetched the set once into its checksum-keyed cache.
    cached = list((fleet.workdir / "backends-e2e" / "data-cache").glob("*.npz"))
    assert [p.stem for p in cached] == [upload.json()["sha256"]]


@pytest.mark.parametrize("processing", ["server", "client"])
def test_image_job_with_processing_on_either_side(fleet, canon: str, processing: str) -> None:  # type: ignore[no-untyped-def]
    """A zip of images pushed with the client; `processing: server` makes ORT and Triton run the processors (stages
    reported by the servers), `processing: client` preprocesses on the follower (client_stages_ms)."""
    import io
    import zipfile

    pytest.importorskip("skimage", reason="scikit-image (images extra) ships the sample images")
    from follower.servers.processing import raw_sample_images
    from tests.integration.follower.test_server_processing import image_classifier

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as archive:
        for i, image in enumerate(raw_sample_images()[:3]):
            archive.writestr(f"img{i}.png", image)
        archive.writestr("labels.txt", "".join(f"class {i}\n" for i in range(10)))  # the top-k's label lookup
    with fleet.client() as client:
        data = client.upload_data(buf.getvalue(), name=f"imgs-{processing}", format="images")
        model = client.upload_model(image_classifier(), name=f"imgcls-{processing}", version="1", format="onnx")
        results = _run(client, f"""
name: images-{processing}
model: {model.ref}
backends: [onnxruntime, triton]
batch_sizes: [1]
load: {{allow_short: true, pattern: constant, rate: 30, duration: 0.5s, warmup: 0.2s}}
data: {{source: upload, id: {data.id}, preprocess: image_imagenet, postprocess: topk, processing: {processing}}}
""")
    rows = {r.point.backend: r for r in results.points}
    assert set(rows) == {"onnxruntime", "triton"}
    for backend, row in rows.items():
        assert row.errors == 0 and row.ok == row.requests > 0, (backend, row.error_sample)
        stats = row.server_stats
        assert stats is not None, backend
        if processing == "server":
            assert stats.preprocess_ms_mean and stats.preprocess_ms_mean > 0, (backend, stats)
            assert row.client_stages_ms is None, backend
        else:
            assert stats.preprocess_ms_mean is None and stats.postprocess_ms_mean is None, (backend, stats)
            assert row.client_stages_ms is not None and row.client_stages_ms["preprocess"] > 0, backend
            assert row.client_stages_ms["postprocess"] > 0, backend  # top-k on the follower, on the server's answers
    # Our server also reports the stages per request: they are in the point's stage breakdown.
    ort_stages = rows["onnxruntime"].stages_ms or {}
    assert (ort_stages.get("preprocess", 0) > 0) == (processing == "server"), ort_stages
