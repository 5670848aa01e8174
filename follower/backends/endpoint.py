"""An endpoint the team already runs, behind the Backend protocol: nothing is started or stopped, readiness is the
endpoint's own health answer, and the model's signature is read from its metadata (KServe v2 over HTTP or gRPC, TF
Serving's REST API) with the target's credentials."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import grpc
import httpx

from common.models import ModelMeta, TensorSpec
from common.targetspec import ENDPOINT, WIRES, TargetSpec
from follower.loadgen.transports import NO_CREDENTIALS, Credentials
from protos import grpc_predict_v2_pb2 as pb
from protos import kserve_v2

METADATA_TIMEOUT_S = 10.0
# TF Serving's dtypes (tensorflow/core/framework/types.proto) as KServe v2 datatypes.
TF_DTYPES = {
    "DT_FLOAT": "FP32", "DT_DOUBLE": "FP64", "DT_HALF": "FP16", "DT_BFLOAT16": "BF16", "DT_INT8": "INT8",
    "DT_INT16": "INT16", "DT_INT32": "INT32", "DT_INT64": "INT64", "DT_UINT8": "UINT8", "DT_UINT16": "UINT16",
    "DT_UINT32": "UINT32", "DT_UINT64": "UINT64", "DT_BOOL": "BOOL", "DT_STRING": "BYTES",
}  # fmt: skip


class EndpointError(RuntimeError):
    """The endpoint did not answer as its protocol says it should (the reason names the URL and what came back)."""


class EndpointRefused(EndpointError):
    """The endpoint refused our credentials (401, 403): asking again will not help."""


def _http(credentials: Credentials) -> httpx.Client:
    verify: Any = credentials.ssl_context()
    return httpx.Client(timeout=METADATA_TIMEOUT_S, verify=verify, headers=dict(credentials.headers), follow_redirects=False)


def _get(url: str, credentials: Credentials) -> httpx.Response:
    """A 200 answer to GET `url`; EndpointRefused for 401/403, EndpointError for anything else."""
    try:
        with _http(credentials) as client:
            response = client.get(url)
    except httpx.HTTPError as exc:
        raise EndpointError(f"{url}: {type(exc).__name__}: {exc}") from None
    if response.status_code in (401, 403):
        raise EndpointRefused(f"{url}: HTTP {response.status_code} (check target.secret): {response.text[:200]}")
    if response.status_code != 200:
        raise EndpointError(f"{url}: HTTP {response.status_code}: {response.text[:200]}")
    return response


def _get_json(url: str, credentials: Credentials) -> Any:
    try:
        return _get(url, credentials).json()
    except ValueError:
        raise EndpointError(f"{url}: the answer is not JSON") from None


def read_signature(target: TargetSpec, model: str, credentials: Credentials = NO_CREDENTIALS) -> list[TensorSpec] | None:
    """The model's inputs as the endpoint describes them; None for a protocol without metadata (OpenAI)."""
    if target.protocol == "kserve-grpc":
        return _grpc_signature(target, model, credentials)
    url = target.metadata_url(model)
    if url is None:
        return None
    meta = _get_json(url, credentials)
    try:
        if target.protocol == "kserve-http":
            return [TensorSpec(name=t["name"], datatype=t["datatype"], shape=[int(d) for d in t["shape"]])
                    for t in meta["inputs"]]  # fmt: skip
        signature = meta["metadata"]["signature_def"]["signature_def"]["serving_default"]["inputs"]
        return [
            TensorSpec(name=name, datatype=TF_DTYPES[t["dtype"]],  # type: ignore[arg-type]
                       shape=[int(d["size"]) for d in t["tensor_shape"].get("dim", [])])  # fmt: skip
            for name, t in sorted(signature.items())
        ]
    except (KeyError, TypeError, ValueError) as exc:
        raise EndpointError(f"{url}: unexpected metadata ({type(exc).__name__}: {exc})") from None


def _grpc_signature(target: TargetSpec, model: str, credentials: Credentials) -> list[TensorSpec]:
    address = urlsplit(target.url).netloc
    metadata = tuple((k.lower(), v) for k, v in credentials.headers) or None
    if target.tls:
        roots = credentials.ca_pem.encode() if credentials.ca_pem else None
        channel = grpc.secure_channel(address, grpc.ssl_channel_credentials(roots))
    else:
        channel = grpc.insecure_channel(address)
    try:
        call = channel.unary_unary(kserve_v2.method_path("ModelMetadata"),
                                   request_serializer=pb.ModelMetadataRequest.SerializeToString,
                                   response_deserializer=pb.ModelMetadataResponse.FromString)  # fmt: skip
        answer = call(pb.ModelMetadataRequest(name=target.model_name or model, version=target.model_version or ""),
                      timeout=METADATA_TIMEOUT_S, metadata=metadata)  # fmt: skip
    except grpc.RpcError as exc:
        raise EndpointError(f"{target.url}: ModelMetadata: {exc.code().name}: {exc.details()}") from None
    finally:
        channel.close()
    return [TensorSpec(name=t.name, datatype=t.datatype, shape=list(t.shape)) for t in answer.inputs]


class EndpointBackend:
    """A target as a backend: start and stop do nothing; ready when the endpoint says it serves the model."""

    name = ENDPOINT

    def __init__(self, target: TargetSpec, credentials: Credentials = NO_CREDENTIALS) -> None:
        self.target, self.credentials = target, credentials
        self.wire = WIRES.get(target.protocol, "kserve")
        self.extra_env: dict[str, str] = {}
        self._model = ""
        self._version = f"{target.protocol} endpoint"

    @classmethod
    def available(cls) -> tuple[bool, str]:
        return True, "drives an endpoint it does not start"

    def version(self) -> str:
        return self._version

    def start(self, model_path: Path, model: ModelMeta, workdir: Path) -> None:
        self._model = model.name  # nothing to start: the endpoint runs already

    def wait_ready(self, timeout_s: float) -> float:
        """Until the endpoint says the model is ready (KServe, TF Serving, OpenAI: their own health answers); 0.0, as
        no start of ours is timed. gRPC readiness is the first answer, which the runner waits for next."""
        t0, last = time.monotonic(), "no answer"
        url = self._ready_url()
        while url is not None and time.monotonic() - t0 < timeout_s:
            try:
                _get(url, self.credentials)  # a 200 is the answer (KServe's readiness has no body to read)
                self._version = self._describe()
                return 0.0
            except EndpointRefused:
                raise
            except EndpointError as exc:
                last = str(exc)
            time.sleep(0.2)
        if url is not None:
            raise EndpointError(f"endpoint not ready within {timeout_s:g}s: {last}")
        return 0.0

    def _ready_url(self) -> str | None:
        if self.target.protocol == "kserve-http":
            return f"{self.target.url}/v2/health/ready"  # the protocol's own readiness (every model loaded)
        if self.target.protocol == "tfserving-rest":
            name = self.target.model_name or self._model
            return f"{self.target.url}/v1/models/{name}"
        if self.target.protocol == "openai":
            return urlsplit(self.target.infer_url(self._model))._replace(path="/v1/models").geturl()
        return None

    def _describe(self) -> str:
        """The endpoint's self-description for the result (KServe: the server's name and version, GET /v2)."""
        if self.target.protocol != "kserve-http":
            return self._version
        try:
            server = _get_json(f"{self.target.url}/v2", self.credentials)
        except EndpointError:
            return self._version
        if isinstance(server, dict) and server.get("name"):
            return f"kserve-http endpoint ({server.get('name')} {server.get('version') or ''})".replace(" )", ")")[:200]
        return self._version

    @property
    def endpoint(self) -> str:
        return self.target.url

    def infer_url(self, model: ModelMeta) -> str:
        return self.target.infer_url(model.name)

    def alive(self) -> bool:
        return True  # not ours to watch: an endpoint that stops answering shows as errors in the records

    def stats(self) -> dict[str, Any]:
        return {}

    def stop(self) -> None:
        return None
