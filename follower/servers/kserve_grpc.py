"""The KServe v2 / Open Inference Protocol over gRPC for benchfleet's own model servers (protos/grpc_predict_v2.proto).

It shares the engine (validation, dynamic batcher, statistics: follower.servers.engine) with the HTTP door
(follower.servers.kserve_http) and runs on the same event loop: two doors into one engine. Tensors travel as raw
bytes (`raw_input_contents` / `raw_output_contents`, row-major little-endian) or as typed `contents`; the per-stage
timings go back in the response's `parameters` as int64 nanoseconds, the same names the HTTP answer carries.
"""

from __future__ import annotations

import math
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import grpc
import numpy as np

from common.formats.datatypes import raw_contents
from follower.servers.engine import BadRequest, KServeModel
from protos import grpc_predict_v2_pb2 as pb
from protos import grpc_predict_v2_pb2_grpc as pb_grpc
from protos import kserve_v2

# Which typed `contents` field carries each datatype (FP16 has none: raw only).
_CONTENTS_FIELD = {
    "BOOL": "bool_contents",
    "INT8": "int_contents",
    "INT16": "int_contents",
    "INT32": "int_contents",
    "INT64": "int64_contents",
    "UINT8": "uint_contents",
    "UINT16": "uint_contents",
    "UINT32": "uint_contents",
    "UINT64": "uint64_contents",
    "FP32": "fp32_contents",
    "FP64": "fp64_contents",
}


def decode_request(model: KServeModel, request: pb.ModelInferRequest) -> tuple[dict[str, np.ndarray], list[str]]:
    """Validate a ModelInferRequest against the model's signature: (feeds, output names), or BadRequest naming the culprit."""
    if request.raw_input_contents and len(request.raw_input_contents) != len(request.inputs):
        raise BadRequest(f"{len(request.raw_input_contents)} raw_input_contents for {len(request.inputs)} inputs")
    feeds: dict[str, np.ndarray] = {}
    for k, tensor in enumerate(request.inputs):
        name = tensor.name
        if name in feeds:
            raise BadRequest(f"input {name!r} is given twice")
        shape = list(tensor.shape)
        if any(d < 0 for d in shape):
            raise BadRequest(f"input {name!r}: shape {shape} has a negative dimension")
        dtype = model.check_input(name, tensor.datatype, shape)
        if dtype == np.dtype(object):
            feeds[name] = _bytes_input(name, request, k, tensor)
            continue
        count = math.prod(shape)
        if request.raw_input_contents:
            raw = request.raw_input_contents[k]
            if len(raw) != count * dtype.itemsize:
                raise BadRequest(f"input {name!r}: {len(raw)} raw bytes do not fill shape {shape} of {tensor.datatype}")
            feeds[name] = np.frombuffer(raw, dtype=dtype.newbyteorder("<")).reshape(shape)
        else:
            field = _CONTENTS_FIELD.get(tensor.datatype)
            values = getattr(tensor.contents, field) if field else ()
            if len(values) != count:
                raise BadRequest(f"input {name!r}: {len(values)} values in contents do not fill shape {shape}")
            feeds[name] = np.asarray(values, dtype=dtype).reshape(shape)
    names = model.check_request(feeds, [o.name for o in request.outputs] or None)
    return feeds, names


def _bytes_input(name: str, request: pb.ModelInferRequest, k: int, tensor: Any) -> np.ndarray:
    """A raw-data BYTES input (server-side preprocessing): 4-byte little-endian lengths before each raw element."""
    shape = list(tensor.shape)
    if any(d < 0 for d in shape) or len(shape) != 2:
        raise BadRequest(f"input {name!r}: shape {shape} does not fit the raw input's [-1, 1]")
    if request.raw_input_contents:
        raw, items, at = request.raw_input_contents[k], [], 0
        while at < len(raw):
            if at + 4 > len(raw):
                raise BadRequest(f"input {name!r}: truncated BYTES element length")
            size = int.from_bytes(raw[at : at + 4], "little")
            if at + 4 + size > len(raw):
                raise BadRequest(f"input {name!r}: BYTES element overruns the raw contents")
            items.append(raw[at + 4 : at + 4 + size])
            at += 4 + size
    else:
        items = list(tensor.contents.bytes_contents)
    if len(items) != math.prod(shape):
        raise BadRequest(f"input {name!r}: {len(items)} BYTES elements do not fill shape {shape}")
    return np.asarray(items, dtype=object).reshape(shape)


class InferenceServicer(pb_grpc.GRPCInferenceServiceServicer):
    """GRPCInferenceService over one KServeModel."""

    def __init__(self, model: KServeModel) -> None:
        self.model = model

    async def _check_model(self, name: str, context: grpc.aio.ServicerContext) -> None:
        if name != self.model.name:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"unknown model {name!r}; this server serves {self.model.name!r}")
        if not self.model.ready:
            await context.abort(grpc.StatusCode.UNAVAILABLE, f"model {name!r} is still loading")

    async def ServerLive(self, request: Any, context: grpc.aio.ServicerContext) -> pb.ServerLiveResponse:  # noqa: N802
        """Always live while the process serves."""
        return pb.ServerLiveResponse(live=True)

    async def ServerReady(self, request: Any, context: grpc.aio.ServicerContext) -> pb.ServerReadyResponse:  # noqa: N802
        """Ready once the model has loaded."""
        return pb.ServerReadyResponse(ready=self.model.ready)

    async def ModelReady(self, request: pb.ModelReadyRequest, context: grpc.aio.ServicerContext) -> pb.ModelReadyResponse:  # noqa: N802
        """Whether the named model is loaded."""
        if request.name != self.model.name:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"unknown model {request.name!r}")
        return pb.ModelReadyResponse(ready=self.model.ready)

    async def ServerMetadata(self, request: Any, context: grpc.aio.ServicerContext) -> pb.ServerMetadataResponse:  # noqa: N802
        """The server's name, engine version and extensions."""
        return pb.ServerMetadataResponse(
            name=f"benchfleet-{self.model.platform}",
            version=str(self.model.engine_version),
            extensions=["benchfleet_stage_timings", "benchfleet_dynamic_batching"],
        )

    async def ModelMetadata(  # noqa: N802
        self, request: pb.ModelMetadataRequest, context: grpc.aio.ServicerContext
    ) -> pb.ModelMetadataResponse:
        """The model's signature."""
        await self._check_model(request.name, context)
        meta = self.model.metadata()
        tensor = pb.ModelMetadataResponse.TensorMetadata
        return pb.ModelMetadataResponse(
            name=meta["name"],
            versions=meta["versions"],
            platform=meta["platform"],
            inputs=[tensor(name=t["name"], datatype=t["datatype"], shape=t["shape"]) for t in meta["inputs"]],
            outputs=[tensor(name=t["name"], datatype=t["datatype"], shape=t["shape"]) for t in meta["outputs"]],
        )

    async def ModelInfer(self, request: pb.ModelInferRequest, context: grpc.aio.ServicerContext) -> pb.ModelInferResponse:  # noqa: N802
        """One inference; stage timings in the response parameters."""
        model = self.model
        await self._check_model(request.model_name, context)
        model.stats["requests"] += 1
        t_decode = time.perf_counter_ns()
        try:
            feeds, names = decode_request(model, request)
        except BadRequest as exc:
            model.stats["errors"] += 1
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        submitted = time.perf_counter_ns()
        try:
            arrays, queue_ns, infer_ns, processing = await model.infer(feeds, names, submitted)
        except BadRequest as exc:  # raw data a server-side preprocessor could not read
            model.stats["errors"] += 1
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        except Exception as exc:  # noqa: BLE001 - engine faults become a status, never a dead stream
            model.stats["errors"] += 1
            code = grpc.StatusCode.INVALID_ARGUMENT if "INVALID_ARGUMENT" in str(exc) else grpc.StatusCode.INTERNAL
            await context.abort(code, f"inference failed: {exc}")
        model.stats["queue_ns"] += queue_ns
        model.stats["infer_ns"] += infer_ns
        t_encode = time.perf_counter_ns()
        response = pb.ModelInferResponse(model_name=model.name, model_version=model.version, id=request.id)
        for name, array in zip(names, arrays, strict=True):
            out = response.outputs.add()
            out.name, out.datatype = name, model.outputs[name]["datatype"]
            out.shape.extend(array.shape)
            response.raw_output_contents.append(raw_contents("BYTES" if array.dtype == np.dtype(object) else out.datatype, array))
        params = {
            "queue_ns": queue_ns,
            "infer_ns": infer_ns,
            "decode_ns": submitted - t_decode,
            "encode_ns": time.perf_counter_ns() - t_encode,
            **processing,
        }
        for key, value in params.items():
            response.parameters[key].int64_param = value
        model.stats["ok"] += 1
        return response


@asynccontextmanager
async def grpc_door(model: KServeModel, host: str, port: int) -> AsyncIterator[grpc.aio.Server]:
    """A grpc.aio server for `model` on host:port while the context lasts (loopback; no TLS: the follower's own host)."""
    server = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
    # Under the standard name inference.GRPCInferenceService (protos/kserve_v2.py): any KServe v2 client can call it.
    kserve_v2.add_to_server(InferenceServicer(model), server)
    if server.add_insecure_port(f"{host}:{port}") == 0:
        raise RuntimeError(f"cannot bind the gRPC port {host}:{port}")
    await server.start()
    try:
        yield server
    finally:
        await server.stop(grace=1.0)
