"""ONNX → Triton model repository: config.pbtxt (instances, dynamic batching) and, where Triton has no onnxruntime
backend (the binary from the nvidia-pytriton wheel), a python-backend model.py that runs the ONNX file with ORT.

The python-backend model is checked against a plain onnxruntime run of the same file by the integration tests; the
config is plain text generated from the model's signature, so nothing here runs the model.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from common.formats.datatypes import V2_TO_TRITON
from common.spec.server import MAX_BATCH, ServerOptions
from common.wire.models import ModelMeta, TensorSpec
from follower.servers import processing as processors

# The python backend's model: one ORT session per instance; a dynamic batch arrives as several requests, which are
# concatenated along the batch axis, run once, and split back. Written verbatim into NAME/1/model.py.
PYTHON_MODEL = '''"""benchfleet: ONNX Runtime inside Triton's python backend (generated)."""
import json
import os
import time

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
        # Server-side processing: benchfleet's own processors (benchfleet_processing.py, copied beside this file from
        # follower/servers/processing.py; never user code) turn the raw BYTES input into the model's tensor and the output
        # into one JSON document per row.
        self.preprocess = params.get("preprocess") or None
        self.postprocess = params.get("postprocess") or None
        self.engine_input_shape = json.loads(params.get("engine_input_shape", "[]"))
        self.processing = None
        if self.preprocess or self.postprocess:
            import benchfleet_processing

            self.processing = benchfleet_processing
            # Triton 2.51's python responses carry no parameters, so the processing stages are counted in custom
            # metrics on Triton's /metrics endpoint (the follower reads them as the point's server stats).
            self.families, self.stage_ns = [], {}
            for stage in ("preprocess", "postprocess"):
                family = pb_utils.MetricFamily(
                    name=f"benchfleet_{stage}_ns_total", description=f"server-side {stage} time (ns)",
                    kind=pb_utils.MetricFamily.COUNTER,
                )
                self.families.append(family)
                self.stage_ns[stage] = family.Metric(labels={"model": config["name"]})

    def execute(self, requests):
        feeds = {name: [] for name in self.inputs}
        sizes, kept, responses, stages = [], [], [None] * len(requests), []
        for k, request in enumerate(requests):
            taken = {name: pb_utils.get_input_tensor_by_name(request, name).as_numpy() for name in self.inputs}
            started = time.perf_counter_ns()
            if self.preprocess:
                name = self.inputs[0]
                try:
                    taken[name] = self.processing.server_preprocess(self.preprocess, taken[name], self.engine_input_shape)
                except ValueError as exc:
                    responses[k] = pb_utils.InferenceResponse(error=pb_utils.TritonError(f"input {name!r}: {exc}"))
                    continue
            for name in self.inputs:
                feeds[name].append(taken[name])
            sizes.append(feeds[self.inputs[0]][-1].shape[0])
            kept.append(k)
            stages.append(time.perf_counter_ns() - started)
        if not kept:
            return responses
        merged = {name: np.concatenate(parts, axis=0) for name, parts in feeds.items()}
        results = self.session.run(self.outputs, merged)
        start = 0
        pre_ns, post_ns = sum(stages), 0
        for k, size in zip(kept, sizes):
            started = time.perf_counter_ns()
            parts = [out[start:start + size] for out in results]
            if self.postprocess:
                parts = [
                    np.asarray([d.encode() for d in self.processing.server_postprocess(self.postprocess, p).ravel()],
                               dtype=np.object_).reshape(size, 1)
                    for p in parts
                ]
            tensors = [pb_utils.Tensor(name, np.ascontiguousarray(p)) for name, p in zip(self.outputs, parts)]
            post_ns += time.perf_counter_ns() - started
            responses[k] = pb_utils.InferenceResponse(output_tensors=tensors)
            start += size
        if self.processing:
            if self.preprocess:
                self.stage_ns["preprocess"].increment(pre_ns)
            if self.postprocess:
                self.stage_ns["postprocess"].increment(post_ns)
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


def served_signature(model: ModelMeta, server: ServerOptions) -> tuple[list[TensorSpec], list[TensorSpec]]:
    """The inputs and outputs Triton serves: raw BYTES [N, 1] where a server-side processor takes or gives them."""
    inputs, outputs = list(model.inputs), list(model.outputs)
    if server.preprocess:
        if len(inputs) != 1:
            raise ValueError(f"server-side preprocessing feeds a model with one input; {model.ref} has {len(inputs)}")
        inputs = [TensorSpec(name=inputs[0].name, datatype="BYTES", shape=[-1, 1])]
    if server.postprocess:
        if len(outputs) != 1:
            raise ValueError(f"server-side postprocessing reads a model with one output; {model.ref} has {len(outputs)}")
        outputs = [TensorSpec(name=outputs[0].name, datatype="BYTES", shape=[-1, 1])]
    return inputs, outputs


def config_pbtxt(model: ModelMeta, server: ServerOptions, *, onnxruntime_backend: bool) -> str:
    """The config.pbtxt text for `model` under `server` options."""
    processing = bool(server.preprocess or server.postprocess)
    # Processors are python: with them the python-backend model runs ORT itself, even where Triton has ORT's backend.
    onnxruntime_backend = onnxruntime_backend and not processing
    served_inputs, served_outputs = served_signature(model, server)
    batched = all(t.shape and t.shape[0] == -1 for t in model.inputs + model.outputs)
    db = server.dynamic_batching
    max_batch = (db.max_batch_size if db is not None else MAX_BATCH) if batched else 0
    lines = [f'name: "{model.name}"']
    lines.append('platform: "onnxruntime_onnx"' if onnxruntime_backend else 'backend: "python"')
    lines.append(f"max_batch_size: {max_batch}")
    lines.append(f"input {_tensor_block(served_inputs, batched and max_batch > 0)}")
    lines.append(f"output {_tensor_block(served_outputs, batched and max_batch > 0)}")
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
    if processing:
        params.update({"preprocess": server.preprocess or "", "postprocess": server.postprocess or ""})
        params["engine_input_shape"] = json.dumps(model.inputs[0].shape).replace('"', "")
    for key, value in params.items():
        lines.append(f'parameters {{ key: "{key}" value: {{ string_value: "{value}" }} }}')
    return "\n".join(lines) + "\n"


def write_repository(onnx_file: Path, model: ModelMeta, repo: Path, server: ServerOptions, *, onnxruntime_backend: bool) -> Path:
    """Write repo/NAME/{config.pbtxt, 1/model.onnx[, 1/model.py]}; returns the model's directory."""
    model_dir = Path(repo) / model.name
    version_dir = model_dir / "1"
    version_dir.mkdir(parents=True, exist_ok=True)
    (model_dir / "config.pbtxt").write_text(config_pbtxt(model, server, onnxruntime_backend=onnxruntime_backend))
    shutil.copyfile(onnx_file, version_dir / "model.onnx")
    processing = bool(server.preprocess or server.postprocess)
    if processing:
        # benchfleet's processors beside the model (the stub ignores PYTHONPATH but puts the model's dir on sys.path).
        shutil.copyfile(str(processors.__file__), version_dir / "benchfleet_processing.py")
    if not onnxruntime_backend or processing:
        (version_dir / "model.py").write_text(PYTHON_MODEL)
    return model_dir
