"""TF Serving's REST API: row-format JSON (`{"inputs": {name: nested lists}}`) to /v1/models/NAME[/versions/V]:predict,
readiness from the model's status, the signature from its metadata (serving_default's inputs)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast
from urllib.parse import quote

import numpy as np
import orjson

from common.formats.datatypes import TF_TO_V2
from common.wire.models import TensorSpec
from follower.protocols.base import Endpoint, Entry, ServingProtocol
from follower.protocols.calls import EndpointError, get, get_json
from follower.protocols.transports import NO_CREDENTIALS, Credentials
from protos import tfserving_api


def tf_tensor(name: str, dtype: str, shape: list[int]) -> TensorSpec:
    """A TF Serving signature's input as a TensorSpec; ValueError naming a dtype with no KServe v2 datatype."""
    if dtype not in TF_TO_V2:
        raise ValueError(f"input {name!r} has dtype {dtype}, which benchfleet cannot generate")
    return TensorSpec(name=name, datatype=TF_TO_V2[dtype], shape=shape)


class TfservingRest(ServingProtocol):
    name = "tfserving-rest"

    def infer_url(self, endpoint: Endpoint) -> str:
        return f"{endpoint.base}/v1/models/{endpoint.model_path()}:predict"

    def ready(self, endpoint: Endpoint, credentials: Credentials = NO_CREDENTIALS) -> bool:
        get(f"{endpoint.base}/v1/models/{quote(endpoint.model, safe='')}", credentials)
        return True

    def signature(self, endpoint: Endpoint, credentials: Credentials = NO_CREDENTIALS) -> list[TensorSpec]:
        url = f"{endpoint.base}/v1/models/{endpoint.model_path()}/metadata"
        meta = get_json(url, credentials)
        try:
            signature = meta["metadata"]["signature_def"]["signature_def"][tfserving_api.DEFAULT_SIGNATURE]["inputs"]
            return [
                tf_tensor(name, t["dtype"], [int(d["size"]) for d in t["tensor_shape"].get("dim", [])])
                for name, t in sorted(signature.items())
            ]
        except (KeyError, TypeError, ValueError) as exc:
            raise EndpointError(f"{url}: unexpected metadata ({type(exc).__name__}: {exc})") from None

    def encode(self, entries: Sequence[Entry]) -> bytes:
        nested = {e["name"]: np.asarray(e["data"]).reshape(cast(list[int], e["shape"])).tolist() for e in entries}
        return orjson.dumps({"inputs": nested})
