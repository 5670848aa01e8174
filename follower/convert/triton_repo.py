"""ONNX → Triton model repository: config.pbtxt (instances, dynamic batching) and, where Triton has no onnxruntime
backend (the binary from the nvidia-pytriton wheel), a python-backend model.py that runs the ONNX file with ORT.

The python-backend model is checked against a plain onnxruntime run of the same file by the integration tests; the
config is plain text generated from the model's signature, so nothing here runs the model.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from common.models import ModelMeta, TensorSpec
from common.spec import MAX_BATCH, ServerOptions

V2_TO_TRITON = {
    "BOOL": "TYPE_BOOL", "UINT8": "TYPE_UINT8", "UINT16": "TYPE_UINT16", "UINT32": "TYPE_UINT32",
    "UINT64": "TYPE_UINT64", "INT8": "TYPE_INT8", "INT16": "TYPE_INT16", "INT32": "TYPE_INT32", "INT64": "TYPE_INT64",
    "FP16": "TYPE_FP16", "FP32": "TYPE_FP32", "FP64": "TYPE_FP64", "BYTES": "TYPE_STRING",
}  # fmt: skip

# The python backend's model: one ORT session per instance; a dynamic batch arrives as several requests, which are
# concatenated along the batch axis, run once, and split back. Written verbatim into NAME/1/model.py.
PYTHON_MODEL = '''"""benchfleet: ONNX Runtime inside Triton's python backend (generated)."""
import json
import os

import numpy as np
import onnxruntime as ort
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        params = {k: v["string_value"] for k, v in config.get("parameters", {}).items()}
        options = ort.SessionOptions()
        threads = int(params.get("intra_op_threads", "0"))
        if threads > 0:
            options.intra_op_num_threads = threads
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        path = os.path.join(os.path.dirname(__file__), "model.onnx")
        providers = [params.get("provider", "CPUExecutionProvider")]
        self.session = ort.InferenceSession(path, sess_options=options, providers=providers)
        if self.session.get_providers()[0] != providers[0]:  # ORT falls back to CPU silently; a benchmark must not
            raise RuntimeError(f"{providers[0]} is not available to onnxruntime here (active: {self.session.get_providers()})")
        self.inputs = [i["name"] for i in config["input"]]
        self.outputs = [o["name"] for o in config["output"]]

    def execute(self, requests):
        feeds = {name: [] for name in self.inputs}
        sizes = []
        for request in requests:
            for name in self.inputs:
                feeds[name].append(pb_utils.get_input_tensor_by_name(request, name).as_numpy())
            sizes.append(feeds[self.inputs[0]][-1].shape[0])
        merged = {name: np.concatenate(parts, axis=0) for name, parts in feeds.items()}
        results = self.session.run(self.outputs, merged)
        responses = []
        start = 0
        for size in sizes:
            tensors = [
                pb_utils.Tensor(name, np.ascontiguousarray(out[start:start + size]))
                for name, out in zip(self.outputs, results)
            ]
            responses.append(pb_utils.InferenceResponse(output_tensors=tensors))
            start += size
        return responses
'''


def _tensor_block(tensors: list[TensorSpec], batched: bool) -> str:
    entries = []
    for t in tensors:
        dims = t.shape[1:] if batched else t.shape
        if t.datatype not in V2_TO_TRITON:
            raise ValueError(f"tensor {t.name!r}: datatype {t.datatype} has no Triton type")
        entries.append(f'  {{ name: "{t.name}" data_type: {V2_TO_TRITON[t.datatype]} dims: [ {", ".join(map(str, dims))} ] }}')
    return "[\n" + ",\n".join(entries) + "\n]"


def config_pbtxt(model: ModelMeta, server: ServerOptions, *, onnxruntime_backend: bool) -> str:
    """The config.pbtxt text for `model` under `server` options."""
    batched = all(t.shape and t.shape[0] == -1 for t in model.inputs + model.outputs)
    db = server.dynamic_batching
    max_batch = (db.max_batch_size if db is not None else MAX_BATCH) if batched else 0
    lines = [f'name: "{model.name}"']
    lines.append('platform: "onnxruntime_onnx"' if onnxruntime_backend else 'backend: "python"')
    lines.append(f"max_batch_size: {max_batch}")
    lines.append(f"input {_tensor_block(model.inputs, batched and max_batch > 0)}")
    lines.append(f"output {_tensor_block(model.outputs, batched and max_batch > 0)}")
    gpus = f" gpus: [ {server.gpu_index} ]" if server.uses_gpu else ""
    kind = "KIND_GPU" if server.uses_gpu else "KIND_CPU"
    lines.append(f"instance_group [ {{ kind: {kind} count: {server.instances}{gpus} }} ]")
    if db is not None and max_batch > 0:
        sizes = ", ".join(map(str, db.preferred_batch_sizes))
        preferred = f" preferred_batch_size: [ {sizes} ]" if db.preferred_batch_sizes else ""
        lines.append(f"dynamic_batching {{{preferred} max_queue_delay_microseconds: {db.max_queue_delay_us} }}")
    params = {"provider": server.ort_provider}
    if server.threads is not None:
        params["intra_op_threads"] = str(server.threads)
    if onnxruntime_backend and server.threads is not None:
        params = {"intra_op_thread_count": str(server.threads)}
    for key, value in params.items():
        lines.append(f'parameters {{ key: "{key}" value: {{ string_value: "{value}" }} }}')
    return "\n".join(lines) + "\n"


def write_repository(onnx_file: Path, model: ModelMeta, repo: Path, server: ServerOptions, *,
                     onnxruntime_backend: bool) -> Path:
    """Write repo/NAME/{config.pbtxt, 1/model.onnx[, 1/model.py]}; returns the model's directory."""
    model_dir = Path(repo) / model.name
    version_dir = model_dir / "1"
    version_dir.mkdir(parents=True, exist_ok=True)
    (model_dir / "config.pbtxt").write_text(config_pbtxt(model, server, onnxruntime_backend=onnxruntime_backend))
    shutil.copyfile(onnx_file, version_dir / "model.onnx")
    if not onnxruntime_backend:
        (version_dir / "model.py").write_text(PYTHON_MODEL)
    return model_dir
