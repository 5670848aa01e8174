"""KServe v2 over HTTP (the Open Inference Protocol's REST binding): JSON tensors to /v2/models/NAME[/versions/V]/infer,
readiness at /v2/health/ready, the signature from the model's metadata, the server's name from GET /v2."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import orjson

from common.formats.datatypes import V2_TO_NUMPY
from common.wire.models import TensorSpec
from follower.protocols.base import Endpoint, Entry, ServingProtocol
from follower.protocols.calls import EndpointError, get, get_json, post_json
from follower.protocols.transports import NO_CREDENTIALS, Credentials


class KserveHttp(ServingProtocol):
    name = "kserve-http"

    def infer_url(self, endpoint: Endpoint) -> str:
        return f"{endpoint.base}/v2/models/{endpoint.model_path()}/infer"

    def ready(self, endpoint: Endpoint, credentials: Credentials = NO_CREDENTIALS) -> bool:
        get(f"{endpoint.base}/v2/health/ready", credentials)  # a 200 is the answer: every model loaded
        return True

    def signature(self, endpoint: Endpoint, credentials: Credentials = NO_CREDENTIALS) -> list[TensorSpec]:
        url = f"{endpoint.base}/v2/models/{endpoint.model_path()}"
        meta = get_json(url, credentials)
        try:
            inputs = meta["inputs"]
            return [TensorSpec(name=t["name"], datatype=t["datatype"], shape=[int(d) for d in t["shape"]]) for t in inputs]
        except (KeyError, TypeError, ValueError) as exc:
            raise EndpointError(f"{url}: unexpected metadata ({type(exc).__name__}: {exc})") from None

    def describe(self, endpoint: Endpoint, credentials: Credentials = NO_CREDENTIALS) -> str | None:
        try:
            server = get_json(f"{endpoint.base}/v2", credentials)
        except EndpointError:
            return None
        if not isinstance(server, dict) or not server.get("name"):
            return None
        return f"{self.name} endpoint ({server.get('name')} {server.get('version') or ''})".replace(" )", ")")[:200]

    def encode(self, entries: Sequence[Entry]) -> bytes:
        return orjson.dumps({"inputs": entries})

    def outputs(self, endpoint: Endpoint, body: bytes, credentials: Credentials = NO_CREDENTIALS) -> dict[str, np.ndarray]:
        url = self.infer_url(endpoint)
        answer = post_json(url, body, credentials)
        try:
            out = {}
            for t in answer["outputs"]:
                dtype = object if t["datatype"] == "BYTES" else V2_TO_NUMPY[t["datatype"]]
                out[t["name"]] = np.asarray(t["data"], dtype=dtype).reshape([int(d) for d in t["shape"]])
            return out
        except (KeyError, TypeError, ValueError) as exc:
            raise EndpointError(f"{url}: unexpected answer ({type(exc).__name__}: {exc})") from None
