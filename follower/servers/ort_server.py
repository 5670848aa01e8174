"""benchfleet's own ONNX Runtime model server: KServe v2 / Open Inference Protocol over HTTP (JSON tensors).

Run as `python -m follower.servers.ort_server --model PATH --name NAME --port P`. The session loads in a
background thread so that `/v2/health/live` answers at once and `/v2/health/ready` turns 200 when the
model can serve. `session.run` runs in a single-thread executor: ORT sessions with intra-op threads are not
meant for concurrent runs, and the wait for that executor is precisely the server's queue stage, which every
answer reports in `parameters` beside decode, inference and encode times (nanoseconds).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import math
import os
import sys
import threading
import time
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from typing import Any

import numpy as np
import onnxruntime as ort
import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

log = logging.getLogger("benchfleet.ort_server")

# ONNX Runtime's type strings ↔ KServe v2 datatypes ↔ numpy dtypes.
ORT_TO_V2: dict[str, str] = {
    "tensor(bool)": "BOOL",
    "tensor(uint8)": "UINT8",
    "tensor(uint16)": "UINT16",
    "tensor(uint32)": "UINT32",
    "tensor(uint64)": "UINT64",
    "tensor(int8)": "INT8",
    "tensor(int16)": "INT16",
    "tensor(int32)": "INT32",
    "tensor(int64)": "INT64",
    "tensor(float16)": "FP16",
    "tensor(float)": "FP32",
    "tensor(double)": "FP64",
    "tensor(string)": "BYTES",
}
V2_TO_NUMPY: dict[str, np.dtype[Any]] = {
    "BOOL": np.dtype(np.bool_),
    "UINT8": np.dtype(np.uint8),
    "UINT16": np.dtype(np.uint16),
    "UINT32": np.dtype(np.uint32),
    "UINT64": np.dtype(np.uint64),
    "INT8": np.dtype(np.int8),
    "INT16": np.dtype(np.int16),
    "INT32": np.dtype(np.int32),
    "INT64": np.dtype(np.int64),
    "FP16": np.dtype(np.float16),
    "FP32": np.dtype(np.float32),
    "FP64": np.dtype(np.float64),
}

_JSON = "application/json"


class BadRequest(Exception):
    """A client error rendered as 400 {"error": ...}."""


def _json(body: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(body), status_code=status, media_type=_JSON)


def _dims(shape: list[Any]) -> list[int]:
    """ORT shapes carry symbolic names or None for dynamic dimensions; KServe writes those as -1."""
    return [d if isinstance(d, int) and d >= 0 else -1 for d in shape]


class ModelServer:
    """One ONNX model behind the Open Inference Protocol."""

    def __init__(self, model_path: str, name: str, version: str, providers: list[str], intra_op_threads: int | None) -> None:
        self.model_path = model_path
        self.name = name
        self.version = version
        self.providers = providers
        self.intra_op_threads = intra_op_threads
        self.session: ort.InferenceSession | None = None
        self.load_error: BaseException | None = None
        self.inputs: dict[str, dict[str, Any]] = {}
        self.outputs: dict[str, dict[str, Any]] = {}
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ort-run")
        self.stats = {"requests": 0, "ok": 0, "errors": 0}

    # -- loading -----------------------------------------------------------------------------------------------

    def load(self) -> None:
        """Create the ORT session (blocking) and cache the signature."""
        options = ort.SessionOptions()
        if self.intra_op_threads is not None:
            options.intra_op_num_threads = self.intra_op_threads
        # Idle ORT worker threads spin by default; on a host shared with the load generator that spinning steals
        # the generator's core and shows up as send lag, so they sleep instead.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        options.add_session_config_entry("session.inter_op.allow_spinning", "0")
        session = ort.InferenceSession(self.model_path, sess_options=options, providers=self.providers)
        self.inputs = {
            i.name: {"name": i.name, "datatype": ORT_TO_V2.get(i.type, i.type), "shape": _dims(i.shape)}
            for i in session.get_inputs()
        }
        self.outputs = {
            o.name: {"name": o.name, "datatype": ORT_TO_V2.get(o.type, o.type), "shape": _dims(o.shape)}
            for o in session.get_outputs()
        }
        self.session = session  # published last: readiness flips only when everything above is in place

    def load_in_background(self, on_failure: Any) -> threading.Thread:
        """Load in a thread so liveness answers while the model loads; call `on_failure` if loading fails."""

        def run() -> None:
            started = time.monotonic()
            try:
                self.load()
                log.warning("model %s loaded from %s in %.3fs", self.name, self.model_path, time.monotonic() - started)
            except BaseException as exc:  # noqa: BLE001 - any failure must end the server, not leave it unready forever
                self.load_error = exc
                log.exception("loading %s failed", self.model_path)
                on_failure()

        thread = threading.Thread(target=run, name="ort-load", daemon=True)
        thread.start()
        return thread

    @property
    def ready(self) -> bool:
        return self.session is not None

    # -- protocol ----------------------------------------------------------------------------------------------

    def metadata(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "versions": [self.version],
            "platform": "onnxruntime_onnx",
            "inputs": list(self.inputs.values()),
            "outputs": list(self.outputs.values()),
        }

    def decode(self, body: bytes) -> tuple[Any, dict[str, np.ndarray], list[str]]:
        """Parse and validate an infer request into (id, feeds, output names), raising BadRequest naming the culprit."""
        try:
            doc = orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            raise BadRequest(f"request body is not valid JSON: {exc}") from None
        if not isinstance(doc, dict) or not isinstance(doc.get("inputs"), list):
            raise BadRequest("request body must be an object with an 'inputs' list")
        feeds: dict[str, np.ndarray] = {}
        for item in doc["inputs"]:
            if not isinstance(item, dict):
                raise BadRequest("each entry of 'inputs' must be an object")
            name = item.get("name")
            spec = self.inputs.get(name)  # type: ignore[arg-type]
            if spec is None:
                raise BadRequest(f"unknown input {name!r}; the model's inputs are {sorted(self.inputs)}")
            if name in feeds:
                raise BadRequest(f"input {name!r} is given twice")
            datatype = item.get("datatype")
            if datatype != spec["datatype"]:
                raise BadRequest(f"input {name!r}: datatype {datatype!r} does not match the model's {spec['datatype']}")
            dtype = V2_TO_NUMPY.get(datatype)
            if dtype is None:
                raise BadRequest(f"input {name!r}: datatype {datatype} is not supported by this server's JSON encoding")
            shape = item.get("shape")
            if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape):
                raise BadRequest(f"input {name!r}: 'shape' must be a list of non-negative integers")
            model_shape = spec["shape"]
            if len(shape) != len(model_shape) or any(m != -1 and m != d for m, d in zip(model_shape, shape, strict=True)):
                raise BadRequest(f"input {name!r}: shape {shape} does not fit the model's {model_shape}")
            data = item.get("data")
            if not isinstance(data, list):
                raise BadRequest(f"input {name!r}: 'data' must be a flat list")
            if len(data) != math.prod(shape):
                raise BadRequest(f"input {name!r}: {len(data)} values do not fill shape {shape}")
            try:
                feeds[name] = np.asarray(data, dtype=dtype).reshape(shape)
            except (TypeError, ValueError, OverflowError) as exc:
                raise BadRequest(f"input {name!r}: data does not convert to {datatype}: {exc}") from None
        missing = sorted(set(self.inputs) - set(feeds))
        if missing:
            raise BadRequest(f"missing inputs {missing}")
        wanted = doc.get("outputs")
        if wanted is None:
            names = list(self.outputs)
        else:
            if not isinstance(wanted, list) or not all(isinstance(o, dict) for o in wanted):
                raise BadRequest("'outputs' must be a list of objects with a 'name'")
            names = [o.get("name") for o in wanted]
            unknown = [n for n in names if n not in self.outputs]
            if unknown:
                raise BadRequest(f"unknown outputs {unknown}; the model's outputs are {sorted(self.outputs)}")
        return doc.get("id"), feeds, names

    def run(self, feeds: dict[str, np.ndarray], names: list[str], submitted_ns: int) -> tuple[list[np.ndarray], int, int]:
        """session.run in the executor thread; returns outputs, time queued for the executor, and run time."""
        assert self.session is not None
        start = time.perf_counter_ns()
        outputs = self.session.run(names, feeds)
        return outputs, start - submitted_ns, time.perf_counter_ns() - start

    def encode_outputs(self, names: list[str], arrays: list[np.ndarray]) -> bytes:
        """The 'outputs' list as JSON bytes (orjson serialises numpy arrays natively)."""
        out = []
        for name, array in zip(names, arrays, strict=True):
            if array.dtype == np.float16:
                array = array.astype(np.float32)  # orjson has no float16; JSON numbers lose nothing
            out.append(
                {"name": name, "datatype": self.outputs[name]["datatype"], "shape": list(array.shape), "data": array.ravel()}
            )
        return orjson.dumps(out, option=orjson.OPT_SERIALIZE_NUMPY)


def build_app(server: ModelServer, *, load: bool = True, on_load_failure: Any = None) -> Starlette:
    """The ASGI app around `server`; `load` starts the background session load at startup."""

    def _unknown(name: str) -> Response:
        return _json({"error": f"unknown model {name!r}; this server serves {server.name!r}"}, 404)

    async def live(request: Request) -> Response:
        return _json({"live": True})

    async def ready(request: Request) -> Response:
        return _json({"ready": server.ready}, 200 if server.ready else 503)

    async def server_metadata(request: Request) -> Response:
        return _json({"name": "benchfleet-ort", "version": ort.__version__, "extensions": ["benchfleet_stage_timings"]})

    async def model_metadata(request: Request) -> Response:
        name = request.path_params["name"]
        if name != server.name:
            return _unknown(name)
        if not server.ready:
            return _json({"error": f"model {name!r} is still loading"}, 503)
        return _json(server.metadata())

    async def model_ready(request: Request) -> Response:
        name = request.path_params["name"]
        if name != server.name:
            return _unknown(name)
        return _json({"name": name, "ready": server.ready}, 200 if server.ready else 503)

    async def stats(request: Request) -> Response:
        name = request.path_params["name"]
        return _json(server.stats) if name == server.name else _unknown(name)

    async def infer(request: Request) -> Response:
        name = request.path_params["name"]
        if name != server.name:
            return _unknown(name)
        if not server.ready:
            return _json({"error": f"model {name!r} is still loading"}, 503)
        server.stats["requests"] += 1
        body = await request.body()
        t_decode = time.perf_counter_ns()
        try:
            request_id, feeds, names = server.decode(body)
        except BadRequest as exc:
            server.stats["errors"] += 1
            return _json({"error": str(exc)}, 400)
        submitted = time.perf_counter_ns()
        decode_ns = submitted - t_decode
        try:
            arrays, queue_ns, infer_ns = await asyncio.get_running_loop().run_in_executor(
                server.executor, server.run, feeds, names, submitted
            )
        except Exception as exc:  # noqa: BLE001 - ORT raises its own types for shape/type faults the checks missed
            server.stats["errors"] += 1
            return _json({"error": f"inference failed: {exc}"}, 400 if "INVALID_ARGUMENT" in str(exc) else 500)
        t_encode = time.perf_counter_ns()
        outputs = server.encode_outputs(names, arrays)
        # The body is spliced by hand so that encode_ns can cover the costly part (the tensors) and still be in it.
        head = b'{"model_name":' + orjson.dumps(server.name)
        if request_id is not None:
            head += b',"id":' + orjson.dumps(request_id)
        encode_ns = time.perf_counter_ns() - t_encode
        params = {"queue_ns": queue_ns, "infer_ns": infer_ns, "decode_ns": decode_ns, "encode_ns": encode_ns}
        server.stats["ok"] += 1
        return Response(head + b',"outputs":' + outputs + b',"parameters":' + orjson.dumps(params) + b"}", media_type=_JSON)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        if load:
            server.load_in_background(on_load_failure or (lambda: None))
        try:
            yield
        finally:
            server.executor.shutdown(wait=False, cancel_futures=True)

    routes = [
        Route("/v2", server_metadata),
        Route("/v2/health/live", live),
        Route("/v2/health/ready", ready),
        Route("/v2/models/{name}", model_metadata),
        Route("/v2/models/{name}/ready", model_ready),
        Route("/v2/models/{name}/stats", stats),
        Route("/v2/models/{name}/infer", infer, methods=["POST"]),
    ]
    return Starlette(routes=routes, lifespan=lifespan)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options of the server."""
    parser = argparse.ArgumentParser(prog="python -m follower.servers.ort_server", description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="path of the .onnx file")
    parser.add_argument("--name", required=True, help="the model name clients use in URLs")
    parser.add_argument("--version", default="1", help="the model version reported in metadata")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--intra-op-threads", type=int, default=None, help="ORT intra-op threads (default: ORT's own choice)")
    parser.add_argument("--provider", action="append", default=None, help="ORT execution provider; repeatable")
    parser.add_argument("--cpus", default=None, help="comma-separated CPU ids to pin the server to (default: unpinned)")
    parser.add_argument("--parent-pid", type=int, default=None, help="exit when this process (the follower) is gone")
    return parser.parse_args(argv)


def _watch_parent(parent_pid: int, on_gone: Any) -> None:
    """Stop the server when the follower that started it dies (even by SIGKILL): no orphan servers."""

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(0.5)
        on_gone()

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def main(argv: list[str] | None = None) -> int:
    """Serve until SIGTERM/SIGINT; exit 1 if the model failed to load."""
    import uvicorn  # imported here so that importing the module (tests, metadata) stays light

    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    intra_op_threads = args.intra_op_threads
    if args.cpus:
        cpus = {int(c) for c in args.cpus.split(",")}
        os.sched_setaffinity(0, cpus)  # before ORT starts its threads, so they inherit it
        intra_op_threads = intra_op_threads or len(cpus)
    server = ModelServer(args.model, args.name, args.version, args.provider or ["CPUExecutionProvider"], intra_op_threads)

    def stop() -> None:
        # Called from the loading thread: uvicorn polls should_exit and shuts down cleanly.
        uv_server.should_exit = True

    config = uvicorn.Config(
        build_app(server, on_load_failure=stop),
        host=args.host,
        port=args.port,
        loop="uvloop",
        http="httptools",
        access_log=False,
        workers=1,
        log_level="warning",
        lifespan="on",
        # Clients keep connections between warm-up and measured runs; don't drop them as idle in between.
        timeout_keep_alive=60,
    )
    uv_server = uvicorn.Server(config)
    if args.parent_pid is not None:
        _watch_parent(args.parent_pid, stop)
    uv_server.run()
    return 1 if server.load_error is not None else 0


if __name__ == "__main__":
    sys.exit(main())
