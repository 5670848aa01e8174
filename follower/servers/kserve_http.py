"""The KServe v2 / Open Inference Protocol HTTP layer shared by benchfleet's own model servers (ORT, TorchScript).

An engine subclasses `KServeModel` and supplies `load()` (blocking: open the model, fill `inputs`/`outputs`, set
`handle` last) and `run_batch()`. This module owns request decoding and validation, response encoding, the per-stage
timings every answer carries in `parameters` (queue, infer, decode, encode; nanoseconds), server-side dynamic
batching, the ASGI app, and the process plumbing (argument parsing, parent watchdog, uvicorn).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import math
import os
import queue
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

log = logging.getLogger("benchfleet.kserve")

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


@dataclass
class _Pending:
    feeds: dict[str, np.ndarray]
    rows: int
    submitted_ns: int
    future: asyncio.Future[tuple[list[np.ndarray], int, int]] = field(repr=False)


class EnginePool:
    """`workers` threads running engine calls for one event loop: a lean `run_in_executor`.

    ThreadPoolExecutor + wrap_future take a lock, build a concurrent Future, chain it to an asyncio one and hop
    back through two callbacks; here a call is one SimpleQueue put and one call_soon_threadsafe back, which halves
    the handoff on a small model. A call still waits in the queue for a free worker: that wait is the queue stage.
    """

    def __init__(self, workers: int, name: str) -> None:
        self.workers = workers
        self.name = name
        self._queue: queue.SimpleQueue[tuple[Any, ...] | None] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._closed = False

    def run(self, loop: asyncio.AbstractEventLoop, fn: Callable[..., Any], *args: Any) -> asyncio.Future[Any]:
        """Run fn(*args) on a worker; the returned future resolves on `loop`."""
        if self._closed:
            raise RuntimeError("engine pool is shut down")
        if len(self._threads) < self.workers:
            self._start_workers()  # lazily, as ThreadPoolExecutor does: threads inherit the CPU pinning done by then
        future: asyncio.Future[Any] = loop.create_future()
        self._queue.put((loop, future, fn, args))
        return future

    def _start_workers(self) -> None:
        with self._lock:
            while len(self._threads) < self.workers:
                thread = threading.Thread(target=self._work, name=f"{self.name}_{len(self._threads)}", daemon=True)
                thread.start()
                self._threads.append(thread)

    @staticmethod
    def _settle(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
        if future.done():  # the awaiting request was cancelled (client gone)
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)

    def _work(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            loop, future, fn, args = item
            if future.done():
                continue
            try:
                result, error = fn(*args), None
            except BaseException as exc:  # noqa: BLE001 - handed to the awaiting request
                result, error = None, exc
            with contextlib.suppress(RuntimeError):  # a closed loop: nobody is waiting any more
                loop.call_soon_threadsafe(self._settle, future, result, error)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Stop the workers once they finish their current call (queued calls are dropped with cancel_futures)."""
        self._closed = True
        if cancel_futures:
            while True:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is not None:
                    with contextlib.suppress(RuntimeError):  # a closed loop: nobody is waiting any more
                        item[0].call_soon_threadsafe(item[1].cancel)
        for _ in self._threads:
            self._queue.put(None)
        if wait:
            for thread in self._threads:
                thread.join()


class KServeModel:
    """One model behind the Open Inference Protocol; engines override `load`, `run_batch` and `platform`."""

    platform = "unknown"
    engine_version = "unknown"

    def __init__(self, model_path: str, name: str, version: str, *, instances: int = 1, max_batch_size: int = 0,
                 max_queue_delay_us: int = 0, preprocess: str | None = None, postprocess: str | None = None) -> None:
        self.model_path = model_path
        self.name = name
        self.version = version
        self.handle: Any = None  # the loaded engine object; set last by load()
        self.load_error: BaseException | None = None
        self.inputs: dict[str, dict[str, Any]] = {}
        self.outputs: dict[str, dict[str, Any]] = {}
        # One worker per instance: the wait for a free worker is exactly the server's queue stage.
        self.executor = EnginePool(max(1, instances), f"{self.platform}-run")
        # executions = engine runs (a dynamic batch is one); queue_ns/infer_ns are summed per request, Triton's way.
        self.stats: dict[str, Any] = {"requests": 0, "ok": 0, "errors": 0, "batches": 0, "batched_rows": 0,
                                      "executions": 0, "queue_ns": 0, "infer_ns": 0}
        # Dynamic batching is on when max_batch_size > 0: requests wait up to max_queue_delay_us to share one run.
        self.max_batch_size = max_batch_size
        self.max_queue_delay_ns = max_queue_delay_us * 1000
        self._pending: list[_Pending] = []
        self._wakeup: asyncio.Event | None = None
        # Server-side processing (follower.servers.processing): the model's one input is then taken raw (BYTES [N, 1]) and
        # preprocessed here, and/or its one output is postprocessed into one JSON document per row.
        self.preprocess = preprocess
        self.postprocess = postprocess
        self._engine_inputs: dict[str, dict[str, Any]] = {}
        self._processing_ready = preprocess is None and postprocess is None
        # Processors run on their own workers, so a slow image decode never waits behind engine runs in their queue.
        self.processing = EnginePool(max(1, instances), f"{self.platform}-process")
        if preprocess or postprocess:
            self.stats.update({"preprocess_ns": 0, "postprocess_ns": 0})

    # -- engine hooks ------------------------------------------------------------------------------------------

    def load(self) -> None:
        """Open the model (blocking); fill inputs/outputs, then set `handle`."""
        raise NotImplementedError

    def run_batch(self, feeds: dict[str, np.ndarray], names: list[str]) -> list[np.ndarray]:
        """Run the engine once on `feeds`, returning the named outputs."""
        raise NotImplementedError

    # -- loading -----------------------------------------------------------------------------------------------

    def load_in_background(self, on_failure: Any) -> threading.Thread:
        """Load in a thread so liveness answers while the model loads; call `on_failure` if loading fails."""

        def run() -> None:
            started = time.monotonic()
            try:
                self.load()
                self._apply_processing()
                log.warning("model %s loaded from %s in %.3fs", self.name, self.model_path, time.monotonic() - started)
            except BaseException as exc:  # noqa: BLE001 - any failure must end the server, not leave it unready forever
                self.load_error = exc
                log.exception("loading %s failed", self.model_path)
                on_failure()

        thread = threading.Thread(target=run, name="model-load", daemon=True)
        thread.start()
        return thread

    @property
    def ready(self) -> bool:
        return self.handle is not None and self._processing_ready

    def _apply_processing(self) -> None:
        """Rewrite the served signature for server-side processing (raw BYTES in, JSON BYTES out); checks the names."""
        from follower.servers.processing import RAW_INPUT_SHAPE, get_processor

        self._engine_inputs = {k: dict(v) for k, v in self.inputs.items()}
        if self.preprocess:
            get_processor(self.preprocess, "pre")
            if len(self.inputs) != 1:
                raise ValueError(f"server-side preprocessing feeds a model with one input; this one has {sorted(self.inputs)}")
            name = next(iter(self.inputs))
            self.inputs[name] = {"name": name, "datatype": "BYTES", "shape": list(RAW_INPUT_SHAPE)}
        if self.postprocess:
            get_processor(self.postprocess, "post")
            if len(self.outputs) != 1:
                raise ValueError(f"server-side postprocessing reads a model with one output; this one has {sorted(self.outputs)}")
            name = next(iter(self.outputs))
            self.outputs[name] = {"name": name, "datatype": "BYTES", "shape": list(RAW_INPUT_SHAPE)}
        self._processing_ready = True

    async def infer(
        self, feeds: dict[str, np.ndarray], names: list[str], submitted_ns: int
    ) -> tuple[list[np.ndarray], int, int, dict[str, int]]:
        """Server-side preprocess, the engine run (`submit`), server-side postprocess: outputs, queue/infer ns, and
        the processing stages' ns ({} when the server runs no processor)."""
        if self.preprocess is None and self.postprocess is None:
            arrays, queue_ns, infer_ns = await self.submit(feeds, names, submitted_ns)
            return arrays, queue_ns, infer_ns, {}
        from follower.servers.processing import server_postprocess, server_preprocess

        loop = asyncio.get_running_loop()
        stages = {"preprocess_ns": 0, "postprocess_ns": 0}
        if self.preprocess:
            name = next(iter(feeds))
            shape = self._engine_inputs[name]["shape"]
            try:
                batch = await self.processing.run(loop, server_preprocess, self.preprocess, feeds[name], shape)
            except ValueError as exc:
                raise BadRequest(f"input {name!r}: {exc}") from None
            feeds = {name: batch}
            now = time.perf_counter_ns()
            stages["preprocess_ns"] = now - submitted_ns
            submitted_ns = now
        arrays, queue_ns, infer_ns = await self.submit(feeds, names, submitted_ns)
        if self.postprocess:
            started = time.perf_counter_ns()
            arrays = [await self.processing.run(loop, server_postprocess, self.postprocess, a) for a in arrays]
            stages["postprocess_ns"] = time.perf_counter_ns() - started
        self.stats["preprocess_ns"] += stages["preprocess_ns"]
        self.stats["postprocess_ns"] += stages["postprocess_ns"]
        return arrays, queue_ns, infer_ns, stages

    # -- protocol ----------------------------------------------------------------------------------------------

    def metadata(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "versions": [self.version],
            "platform": self.platform,
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
            dtype = np.dtype(object) if datatype == "BYTES" and self.preprocess else V2_TO_NUMPY.get(datatype)
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
            if dtype == np.dtype(object) and not all(isinstance(v, str) for v in data):
                raise BadRequest(f"input {name!r}: BYTES elements must be strings (base64 for binary data)")
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
        """One engine run in an executor thread; returns outputs, time queued for the executor, and run time."""
        start = time.perf_counter_ns()
        outputs = self.run_batch(feeds, names)
        return outputs, start - submitted_ns, time.perf_counter_ns() - start

    async def submit(
        self, feeds: dict[str, np.ndarray], names: list[str], submitted_ns: int
    ) -> tuple[list[np.ndarray], int, int]:
        """Run now, or through the dynamic batcher when it is on (every output is requested, then narrowed)."""
        loop = asyncio.get_running_loop()
        if self.max_batch_size <= 0:
            result = await self.executor.run(loop, self.run, feeds, names, submitted_ns)
            self.stats["executions"] += 1  # counted on the event loop: no two threads update it
            return result
        rows = min(int(a.shape[0]) if a.ndim else 1 for a in feeds.values())
        future: asyncio.Future[tuple[list[np.ndarray], int, int]] = loop.create_future()
        self._pending.append(_Pending(feeds, rows, submitted_ns, future))
        if self._wakeup is None:
            self._wakeup = asyncio.Event()
            loop.create_task(self._batcher())
        self._wakeup.set()
        outputs, queue_ns, infer_ns = await future
        all_names = list(self.outputs)
        return [outputs[all_names.index(n)] for n in names], queue_ns, infer_ns

    async def _batcher(self) -> None:
        """Gather pending requests into batches of at most max_batch_size rows, waiting at most the queue delay."""
        assert self._wakeup is not None
        loop = asyncio.get_running_loop()
        names = list(self.outputs)
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            while self._pending:
                deadline_ns = self._pending[0].submitted_ns + self.max_queue_delay_ns
                while sum(p.rows for p in self._pending) < self.max_batch_size:
                    left = deadline_ns - time.perf_counter_ns()
                    if left <= 0:
                        break
                    self._wakeup.clear()
                    try:
                        await asyncio.wait_for(self._wakeup.wait(), left / 1e9)
                    except TimeoutError:
                        break
                batch: list[_Pending] = []
                rows = 0
                while self._pending and (not batch or rows + self._pending[0].rows <= self.max_batch_size):
                    item = self._pending.pop(0)
                    batch.append(item)
                    rows += item.rows
                feeds = {k: np.concatenate([p.feeds[k] for p in batch], axis=0) for k in batch[0].feeds}
                started = time.perf_counter_ns()
                try:
                    outputs, _, infer_ns = await self.executor.run(loop, self.run, feeds, names, started)
                except Exception as exc:  # noqa: BLE001 - the engine's error goes to every request of the batch
                    for p in batch:
                        if not p.future.done():
                            p.future.set_exception(exc)
                    continue
                self.stats["batches"] += 1
                self.stats["executions"] += 1
                self.stats["batched_rows"] += rows
                offset = 0
                for p in batch:
                    part = [o[offset : offset + p.rows] for o in outputs]
                    offset += p.rows
                    if not p.future.done():
                        # Queue = time from arrival to the batch's run start (batching delay + executor wait).
                        p.future.set_result((part, started - p.submitted_ns, infer_ns))

    def encode_outputs(self, names: list[str], arrays: list[np.ndarray]) -> bytes:
        """The 'outputs' list as JSON bytes (orjson serialises numpy arrays natively)."""
        out = []
        for name, array in zip(names, arrays, strict=True):
            if array.dtype == np.float16:
                array = array.astype(np.float32)  # orjson has no float16; JSON numbers lose nothing
            # BYTES (postprocessed JSON documents) are an object array, which orjson's numpy support refuses.
            data: Any = array.ravel().tolist() if array.dtype == np.dtype(object) else array.ravel()
            out.append({"name": name, "datatype": self.outputs[name]["datatype"], "shape": list(array.shape), "data": data})
        return orjson.dumps(out, option=orjson.OPT_SERIALIZE_NUMPY)


class _KServeApp(Starlette):
    """Starlette, but POST <infer_path> skips Starlette's middleware stack, routing, Request and Response objects.

    On a small model those cost several times the engine run. The answer is the same as the Route's: status, JSON
    body, content-length and content-type (uvicorn adds date and server, as it does for every response).
    """

    def __init__(self, infer_path: str, infer_body: Callable[[bytes], Awaitable[tuple[int, bytes]]], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._infer_path = infer_path
        self._infer_body = infer_body

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["path"] != self._infer_path or scope["method"] != "POST":
            await super().__call__(scope, receive, send)
            return
        message = await receive()
        if message["type"] == "http.disconnect":
            return
        body = message.get("body", b"")
        if message.get("more_body", False):
            chunks = [body]
            while message.get("more_body", False):
                message = await receive()
                if message["type"] == "http.disconnect":
                    return
                chunks.append(message.get("body", b""))
            body = b"".join(chunks)
        status, payload = await self._infer_body(body)
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-length", str(len(payload)).encode("ascii")), (b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": payload})


def build_app(server: KServeModel, *, load: bool = True, on_load_failure: Callable[[], None] | None = None,
              grpc_address: tuple[str, int] | None = None) -> Starlette:
    """The ASGI app around `server`; `load` starts the background session load at startup.

    With `grpc_address` the same model also answers KServe v2 gRPC there (follower.servers.kserve_grpc), on this loop.
    """

    def _unknown(name: str) -> Response:
        return _json({"error": f"unknown model {name!r}; this server serves {server.name!r}"}, 404)

    async def live(request: Request) -> Response:
        return _json({"live": True})

    async def ready(request: Request) -> Response:
        return _json({"ready": server.ready}, 200 if server.ready else 503)

    async def server_metadata(request: Request) -> Response:
        extensions = ["benchfleet_stage_timings", "benchfleet_dynamic_batching"]
        return _json({"name": f"benchfleet-{server.platform}", "version": server.engine_version, "extensions": extensions})

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

    async def infer_body(body: bytes) -> tuple[int, bytes]:
        """One infer request for this model, from its body to (status, JSON body): the whole protocol part."""
        if not server.ready:
            return 503, orjson.dumps({"error": f"model {server.name!r} is still loading"})
        server.stats["requests"] += 1
        t_decode = time.perf_counter_ns()
        try:
            request_id, feeds, names = server.decode(body)
        except BadRequest as exc:
            server.stats["errors"] += 1
            return 400, orjson.dumps({"error": str(exc)})
        submitted = time.perf_counter_ns()
        decode_ns = submitted - t_decode
        try:
            arrays, queue_ns, infer_ns, processing = await server.infer(feeds, names, submitted)
        except BadRequest as exc:  # raw data a server-side preprocessor could not read
            server.stats["errors"] += 1
            return 400, orjson.dumps({"error": str(exc)})
        except Exception as exc:  # noqa: BLE001 - ORT raises its own types for shape/type faults the checks missed
            server.stats["errors"] += 1
            return 400 if "INVALID_ARGUMENT" in str(exc) else 500, orjson.dumps({"error": f"inference failed: {exc}"})
        server.stats["queue_ns"] += queue_ns
        server.stats["infer_ns"] += infer_ns
        t_encode = time.perf_counter_ns()
        outputs = server.encode_outputs(names, arrays)
        # The body is spliced by hand so that encode_ns can cover the costly part (the tensors) and still be in it.
        head = b'{"model_name":' + orjson.dumps(server.name)
        if request_id is not None:
            head += b',"id":' + orjson.dumps(request_id)
        encode_ns = time.perf_counter_ns() - t_encode
        params = {"queue_ns": queue_ns, "infer_ns": infer_ns, "decode_ns": decode_ns, "encode_ns": encode_ns, **processing}
        server.stats["ok"] += 1
        return 200, head + b',"outputs":' + outputs + b',"parameters":' + orjson.dumps(params) + b"}"

    async def infer(request: Request) -> Response:
        name = request.path_params["name"]
        if name != server.name:
            return _unknown(name)
        status, payload = await infer_body(await request.body())
        return Response(payload, status_code=status, media_type=_JSON)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        if load:
            server.load_in_background(on_load_failure or (lambda: None))
        grpc_server = None
        if grpc_address is not None:
            from follower.servers.kserve_grpc import start_grpc  # grpc loads only where it is asked for

            grpc_server = await start_grpc(server, *grpc_address)
        try:
            yield
        finally:
            if grpc_server is not None:
                await grpc_server.stop(grace=1.0)
            server.executor.shutdown(wait=False, cancel_futures=True)
            server.processing.shutdown(wait=False, cancel_futures=True)

    routes = [
        Route("/v2", server_metadata),
        Route("/v2/health/live", live),
        Route("/v2/health/ready", ready),
        Route("/v2/models/{name}", model_metadata),
        Route("/v2/models/{name}/ready", model_ready),
        Route("/v2/models/{name}/stats", stats),
        Route("/v2/models/{name}/infer", infer, methods=["POST"]),
    ]
    # The hot path, POST /v2/models/<this model>/infer, is served as raw ASGI (see _KServeApp); the route above
    # still answers every other spelling of it (a wrong model name or method), with the same bodies.
    return _KServeApp(f"/v2/models/{server.name}/infer", infer_body, routes=routes, lifespan=lifespan)


def add_common_args(parser: argparse.ArgumentParser) -> None:
    """The options every benchfleet model server takes."""
    parser.add_argument("--model", required=True, help="path of the model file")
    parser.add_argument("--name", required=True, help="the model name clients use in URLs")
    parser.add_argument("--version", default="1", help="the model version reported in metadata")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--grpc-port", type=int, default=None, help="also serve KServe v2 gRPC on this port (same host)")
    parser.add_argument("--instances", type=int, default=1, help="concurrent engine runs (executor workers)")
    parser.add_argument("--max-batch-size", type=int, default=0, help="dynamic batching: rows per run (0 = off)")
    parser.add_argument("--max-queue-delay-us", type=int, default=0, help="dynamic batching: longest wait to fill a batch")
    parser.add_argument("--cpus", default=None, help="comma-separated CPU ids to pin the server to (default: unpinned)")
    parser.add_argument("--parent-pid", type=int, default=None, help="exit when this process (the follower) is gone")
    parser.add_argument("--preprocess", default=None, help="server-side preprocessor (follower.servers.processing): raw input")
    parser.add_argument("--postprocess", default=None, help="server-side postprocessor (follower.servers.processing)")


def pin_cpus(spec: str | None) -> set[int] | None:
    """Pin this process to the given CPUs (before the engine starts its threads, so they inherit it)."""
    if not spec:
        return None
    cpus = {int(c) for c in spec.split(",")}
    os.sched_setaffinity(0, cpus)
    return cpus


def watch_parent(parent_pid: int, on_gone: Any) -> None:
    """Stop the server when the follower that started it dies (even by SIGKILL): no orphan servers."""

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(0.5)
        on_gone()

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def serve(server: KServeModel, host: str, port: int, parent_pid: int | None, grpc_port: int | None = None) -> int:
    """Serve until SIGTERM/SIGINT (or the parent's death); exit code 1 if the model failed to load."""
    import uvicorn  # imported here so that importing the module (tests, metadata) stays light

    def stop() -> None:
        # Called from the loading or watchdog thread: uvicorn polls should_exit and shuts down cleanly.
        uv_server.should_exit = True

    config = uvicorn.Config(
        build_app(server, on_load_failure=stop, grpc_address=(host, grpc_port) if grpc_port else None),
        host=host,
        port=port,
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
    if parent_pid is not None:
        watch_parent(parent_pid, stop)
    uv_server.run()
    return 1 if server.load_error is not None else 0
