"""Request data for a job's bodies: an uploaded data set (fetched once, cached by checksum) or scikit-image samples.

Returns per model input a list of one-sample arrays (follower.loadgen.bodies draws batches from it), after the
named preprocessor where the spec asks for one. Processing runs here, on the follower (client-side); it never runs on
the leader.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np

from common.datasets import DataSetMeta, load_samples
from common.models import ModelMeta, TensorSpec
from common.spec import DataRef
from follower.leader_client import LeaderClient
from follower.processing import SAMPLE_IMAGES, get_processor, image_to_tensor, sample_images

Samples = dict[str, list[np.ndarray]]


def fetch_data(client: LeaderClient, data_id: str, cache_dir: Path) -> tuple[Path, DataSetMeta, bool]:
    """The local path of a data set, its metadata, and whether it came from the cache (keyed by sha256)."""
    meta = client.data_meta(data_id)
    cache_dir.mkdir(parents=True, exist_ok=True)
    path = cache_dir / f"{meta.sha256}.{meta.format}"
    if path.exists() and hashlib.sha256(path.read_bytes()).hexdigest() == meta.sha256:
        return path, meta, True
    client.download_data(meta, path)
    return path, meta, False


def _image_input(model: ModelMeta) -> tuple[TensorSpec, int]:
    """The model's one image input (N×3×S×S) and its side S, or a ValueError saying why images cannot feed it."""
    if len(model.inputs) != 1 or len(model.inputs[0].shape) != 4 or model.inputs[0].shape[1] not in (3, -1):
        raise ValueError(f"images feed a model with one N×3×H×W input; {model.ref} takes {[t.shape for t in model.inputs]}")
    spec = model.inputs[0]
    side = spec.shape[2] if spec.shape[2] > 0 else 224
    return spec, side


def resolve_samples(data: DataRef, model: ModelMeta, *, client: LeaderClient | None, cache_dir: Path) -> Samples | None:
    """The samples the job's `data:` block asks for; None for synthetic data (bodies come from the signature)."""
    if data.source == "synthetic":
        return None
    if data.source == "sample_images":
        spec, side = _image_input(model)
        return {spec.name: list(sample_images(len(SAMPLE_IMAGES), side))}
    if client is None or data.id is None:
        raise ValueError("uploaded request data needs the leader to fetch it from")
    path, meta, _ = fetch_data(client, data.id, cache_dir)
    raw = load_samples(str(path), meta.format)
    if isinstance(raw, list):  # a zip of images: decode + preprocess (image_imagenet unless another is named)
        spec, side = _image_input(model)
        process = get_processor(data.preprocess) if data.preprocess else image_to_tensor
        return {spec.name: [np.asarray(process(img, side) if process is image_to_tensor else process(img)) for img in raw]}
    if data.preprocess:
        process = get_processor(data.preprocess)
        raw = {k: [np.asarray(process(v.item() if v.ndim == 0 else v)) for v in vs] for k, vs in raw.items()}
    return raw
