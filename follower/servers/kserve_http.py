"""KServe v2 / Open Inference Protocol over HTTP (JSON tensors) for benchfleet's own model servers: the codec and the
ASGI app. The engine behind it (validation, batching, stage timings) is follower.servers.engine's, shared with gRPC.
"""

from __future__ import annotations

import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from typing import Any

import numpy as np
import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from follower.servers.engine import BadRequest, KServeModel

_JSON = "application/json"


def _json(body: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(body), status_code=status, media_type=_JSON)


def decode_request(model: KServeModel, body: bytes) -> tuple[Any, dict[str, np.ndarray], list[str]]:
    """Parse and validate a JSON infer request into (id, feeds, output names), raising BadRequest naming the culprit."""
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
        name, shape = item.get("name"), item.get("shape")
        if not isinstance(name, str):
            raise BadRequest(f"unknown input {name!r}; the model's inputs are {sorted(model.inputs)}")
        if name in feeds:
            raise BadRequest(f"input {name!r} is given twice")
        if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape):
            raise BadRequest(f"input {name!r}: 'shape' must be a list of non-negative integers")
        datatype = item.get("datatype")
        dtype = model.check_input(name, str(datatype), shape)
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
    wanted = doc.get("outputs")
    if wanted is not None and (not isinstance(wanted, list) or not all(isinstance(o, dict) for o in wanted)):
        raise BadRequest("'outputs' must be a list of objects with a 'name'")
    names = model.check_request(feeds, None if wanted is None else [o.get("name") for o in wanted])
    return doc.get("id"), feeds, names


def encode_outputs(model: KServeModel, names: list[str], arrays: list[np.ndarray]) -> bytes:
    """The 'outputs' list as JSON bytes (orjson serialises numpy arrays natively)."""
    out = []
    for name, array in zip(names, arrays, strict=True):
        if array.dtype == np.float16:
            array = array.astype(np.float32)  # orjson has no float16; JSON numbers lose nothing
        # BYTES (postprocessed JSON documents) are an object array, which orjson's numpy support refuses.
        data: Any = array.ravel().tolist() if array.dtype == np.dtype(object) else array.ravel()
        out.append({"name": name, "datatype": model.outputs[name]["datatype"], "shape": list(array.shape), "data": data})
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
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [(b"content-length", str(len(payload)).encode("ascii")), (b"content-type", b"application/json")],
            }
        )
        await send({"type": "http.response.body", "body": payload})


def build_app(
    server: KServeModel,
    *,
    load: bool = True,
    on_load_failure: Callable[[], None] | None = None,
    companions: Sequence[AbstractAsyncContextManager[Any]] = (),
) -> Starlette:
    """The ASGI app around `server`; `load` starts the background model load at startup.

    `companions` run for the app's lifetime on its loop (follower.servers.process adds the gRPC door this way).
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
            request_id, feeds, names = decode_request(server, body)
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
        outputs = encode_outputs(server, names, arrays)
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
        try:
            async with AsyncExitStack() as stack:
                for companion in companions:
                    await stack.enter_async_context(companion)
                yield
        finally:
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
