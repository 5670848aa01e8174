"""Request data for a job's bodies: an uploaded data set (fetched once, cached by checksum) or scikit-image samples.

Returns per model input a list of one-sample arrays (follower.loadgen.bodies draws batches from it), after the
named preprocessor where the spec asks for one. Processing runs here, on the follower (client-side), or with
`processing: server` the samples stay raw (encoded image bytes, text) for the model server's own processors; it never
runs on the leader.
"""

from __future__ import annotations

import hashlib
import time
from pathlib import Path

import numpy as np

from common.formats.datasets import DataSetMeta, load_labels, load_samples, load_targets, load_truth
from common.formats.datatypes import V2_TO_NUMPY
from common.spec.job import DataRef
from common.wire.models import ModelMeta, TensorSpec
from common.wire.results import PointResult
from follower.link.leader_client import LeaderClient
from follower.loadgen.bodies import Samples
from follower.servers.processing import SAMPLE_IMAGES, get_processor, image_to_tensor, raw_sample_images, sample_images


def fetch_data(client: LeaderClient, data_id: str, cache_dir: Path) -> tuple[Path, DataSetMeta, bool]:
    """The local path of a data set, its metadata, and whether it came from the cache (keyed by sha256)."""
    meta = client.data_meta(data_id)
    cache_dir.mkdir(parents=True, exist_ok=True)
    path = cache_dir / f"{meta.sha256}.{meta.format}"
    if path.exists() and hashlib.sha256(path.read_bytes()).hexdigest() == meta.sha256:
        return path, meta, True
    client.download_data(meta, path)
    return path, meta, False


def resolve_labels(data: DataRef, *, client: LeaderClient | None, cache_dir: Path) -> tuple[str, ...] | None:
    """The class labels the job's uploaded data set carries (its labels.txt), for a client-side topk post-processor
    (a server runs its own processors without them)."""
    if data.source != "upload" or data.postprocess is None or data.processing != "client" or client is None or data.id is None:
        return None
    path, meta, _ = fetch_data(client, data.id, cache_dir)
    labels = load_labels(str(path), meta.format)
    return tuple(labels) if labels is not None else None


def resolve_truth(data: DataRef, *, client: LeaderClient | None, cache_dir: Path) -> tuple[np.ndarray | None, np.ndarray | None]:
    """Each uploaded sample's true class (an npz `labels` array, a JSONL `label`), for quality.accuracy, and its true
    values (an npz `targets` array, a JSONL `target`), for quality.regression; None for what the data carries none of."""
    if data.source != "upload" or client is None or data.id is None:
        return None, None
    path, meta, _ = fetch_data(client, data.id, cache_dir)
    return load_truth(str(path), meta.format), load_targets(str(path), meta.format)


def _image_input(model: ModelMeta) -> tuple[TensorSpec, int]:
    """The model's one image input (N×3×S×S) and its side S, or a ValueError saying why images cannot feed it."""
    if len(model.inputs) != 1 or len(model.inputs[0].shape) != 4 or model.inputs[0].shape[1] not in (3, -1):
        raise ValueError(f"images feed a model with one N×3×H×W input; {model.ref} takes {[t.shape for t in model.inputs]}")
    spec = model.inputs[0]
    side = spec.shape[2] if spec.shape[2] > 0 else 224
    return spec, side


MAX_CALIBRATION = 256  # samples static INT8 calibrates its activation ranges on


def resolve_samples(data: DataRef, model: ModelMeta, *, client: LeaderClient | None, cache_dir: Path) -> Samples | None:
    """The samples the job's `data:` block asks for; None for synthetic data (bodies come from the signature)."""
    return resolve_request_data(data, model, client=client, cache_dir=cache_dir)[0]


def resolve_request_data(
    data: DataRef, model: ModelMeta, *, client: LeaderClient | None, cache_dir: Path
) -> tuple[Samples | None, dict[str, float] | None]:
    """The samples, and the client-side processing cost per sample in ms ({"preprocess": ...}; None if none ran).

    With `processing: server` the samples are raw (bytes / text, one per sample) and no processing runs here.
    """
    if data.source == "synthetic":
        return None, None
    server_side = data.processing == "server" and data.preprocess is not None
    if data.source == "sample_images":
        spec, side = _image_input(model)
        if server_side:
            return {spec.name: list(raw_sample_images())}, None
        started = time.perf_counter()
        images = list(sample_images(len(SAMPLE_IMAGES), side))
        return {spec.name: images}, {"preprocess": (time.perf_counter() - started) * 1e3 / len(images)}
    if client is None or data.id is None:
        raise ValueError("uploaded request data needs the leader to fetch it from")
    path, meta, _ = fetch_data(client, data.id, cache_dir)
    raw = load_samples(str(path), meta.format)
    if server_side:
        if isinstance(raw, list):
            spec, _ = _image_input(model)
            return {spec.name: list(raw)}, None
        return {k: [v.item() if v.ndim == 0 else v for v in vs] for k, vs in raw.items()}, None
    started = time.perf_counter()
    samples = _processed(data, model, raw)
    count = max((len(v) for v in samples.values()), default=0)
    if isinstance(raw, list) or data.preprocess:
        return samples, {"preprocess": (time.perf_counter() - started) * 1e3 / max(count, 1)}
    return samples, None


def _processed(data: DataRef, model: ModelMeta, raw: dict[str, list[np.ndarray]] | list[bytes]) -> Samples:
    """Uploaded samples through the client-side preprocessor (images: image_imagenet unless another is named)."""
    if isinstance(raw, list):  # a zip of images: decode + preprocess (image_imagenet unless another is named)
        spec, side = _image_input(model)
        process = get_processor(data.preprocess) if data.preprocess else image_to_tensor
        return {spec.name: [np.asarray(process(img, side) if process is image_to_tensor else process(img)) for img in raw]}
    if data.preprocess:
        process = get_processor(data.preprocess)
        raw = {k: [np.asarray(process(v.item() if v.ndim == 0 else v)) for v in vs] for k, vs in raw.items()}
    return raw


def write_calibration(samples: Samples | None, model: ModelMeta, out: Path) -> Path:
    """The first MAX_CALIBRATION samples as the model's inputs (one array per input, [n, ...] in its datatype), written
    to `out` (an npz) for `server.precision: int8_static` to calibrate on; a ValueError naming what does not fit."""
    what = "server.precision int8_static calibrates on the request data as the model's inputs"
    if not samples:
        raise ValueError(f"{what}: the job has none (data: {{source: upload, id: ...}})")
    arrays: dict[str, np.ndarray] = {}
    for spec in model.inputs:
        rows = samples.get(spec.name)
        if rows is None:
            raise ValueError(f"{what}: the data has no {spec.name!r}, a model input")
        try:
            taken = [np.asarray(v, dtype=V2_TO_NUMPY[spec.datatype]) for v in list(rows)[:MAX_CALIBRATION]]
            arrays[spec.name] = np.stack(taken)
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"{what}: {spec.name!r} is not {spec.datatype} arrays of one shape ({exc})") from None
    with out.open("wb") as f:
        np.savez(f, **arrays)  # type: ignore[arg-type]  # numpy's stub types **kwds as ArrayLike
    return out


def with_client_stages(result: PointResult, per_sample_ms: dict[str, float] | None) -> PointResult:
    """The point's result with its client-side processing cost per request (per sample × the point's batch size)."""
    if not per_sample_ms:
        return result
    per_request = {k: v * result.point.batch_size for k, v in per_sample_ms.items()}
    return result.model_copy(update={"client_stages_ms": {**per_request, **(result.client_stages_ms or {})}})
