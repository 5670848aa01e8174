"""TF Serving's REST API (https://www.tensorflow.org/tfx/serving/api_rest): the columnar format
(`{"inputs": {name: nested lists}}`, answered with `outputs`) to /v1/models/NAME[/versions/V | /labels/L]:predict (a
numeric model_version is a version, another a version label), readiness from the model's status (a version
AVAILABLE), the signature from its metadata (serving_default's inputs)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast
from urllib.parse import quote

import numpy as np
import orjson

from common.formats.datatypes import TF_TO_V2
from common.wire.models import TensorSpec
from follower.protocols.base import Endpoint, Entry, ServingProtocol
from follower.protocols.calls import EndpointError, get_json, post_json
from follower.protocols.transports import NO_CREDENTIALS, Credentials
from protos import tfserving_api


def tf_tensor(name: str, dtype: str, shape: list[int]) -> TensorSpec:
    """A TF Serving signature's input as a TensorSpec; ValueError naming a dtype with no KServe v2 datatype."""
    if dtype not in TF_TO_V2:
        raise ValueError(f"input {name!r} has dtype {dtype}, which benchfleet cannot generate")
    return TensorSpec(name=name, datatype=TF_TO_V2[dtype], shape=shape)


class TfservingRest(ServingProtocol):
    name = "tfserving-rest"

    def model_url(self, endpoint: Endpoint) -> str:
        """The model's URL: its version, or its version label (TF Serving's /labels/L), where one is asked for."""
        url = f"{endpoint.base}/v1/models/{quote(endpoint.model, safe='')}"
        if endpoint.version is None:
            return url
        kind = "versions" if endpoint.version.isdigit() else "labels"
        return f"{url}/{kind}/{quote(endpoint.version, safe='')}"

    def infer_url(self, endpoint: Endpoint) -> str:
        return f"{self.model_url(endpoint)}:predict"

    def ready(self, endpoint: Endpoint, credentials: Credentials = NO_CREDENTIALS) -> bool:
        """Whether the model's status lists a version AVAILABLE (TF Serving answers 200 while it is still LOADING)."""
        url = self.model_url(endpoint)
        try:
            versions = get_json(url, credentials)["model_version_status"]
            return any(v.get("state") == "AVAILABLE" for v in versions)
        except (KeyError, TypeError, AttributeError) as exc:
            raise EndpointError(f"{url}: unexpected model status ({type(exc).__name__}: {exc})") from None

    def signature(self, endpoint: Endpoint, credentials: Credentials = NO_CREDENTIALS) -> list[TensorSpec]:
        url = f"{self.model_url(endpoint)}/metadata"
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

    def outputs(self, endpoint: Endpoint, body: bytes, credentials: Credentials = NO_CREDENTIALS) -> dict[str, np.ndarray]:
        """The columnar answer's `outputs`: a map of named outputs, or the one output itself (named `outputs` here, as
        TF Serving names none); JSON carries no dtype, so numbers come back as numpy infers them."""
        url = self.infer_url(endpoint)
        answer = post_json(url, body, credentials)
        try:
            outputs = answer["outputs"]
            named = outputs if isinstance(outputs, dict) else {"outputs": outputs}
            return {str(name): np.asarray(value) for name, value in named.items()}
        except (KeyError, TypeError, ValueError) as exc:
            raise EndpointError(f"{url}: unexpected answer ({type(exc).__name__}: {exc})") from None
