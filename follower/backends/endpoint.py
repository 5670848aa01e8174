"""An endpoint the team already runs, behind the Backend protocol: nothing is started or stopped, readiness is the
endpoint's own health answer, and the model's signature is read from its metadata (KServe v2 over HTTP or gRPC, TF
Serving's REST or gRPC API) with the target's credentials."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import grpc
import httpx

from common.datatypes import TF_TO_V2
from common.models import ModelMeta, TensorSpec
from common.targetspec import ENDPOINT, WIRES, TargetSpec
from follower.loadgen.transports import NO_CREDENTIALS, Credentials
from protos import grpc_predict_v2_pb2 as pb
from protos import kserve_v2, tfserving_api
from protos import tfserving_pb2 as tf_pb

METADATA_TIMEOUT_S = 10.0
REFUSED = (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED)


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
    if target.protocol in ("kserve-grpc", "tfserving-grpc"):
        return _grpc_signature(target, model, credentials)
    url = target.metadata_url(model)
    if url is None:
        return None
    meta = _get_json(url, credentials)
    try:
        if target.protocol == "kserve-http":
            return [TensorSpec(name=t["name"], datatype=t["datatype"], shape=[int(d) for d in t["shape"]])
                    for t in meta["inputs"]]  # fmt: skip
        signature = meta["metadata"]["signature_def"]["signature_def"][tfserving_api.DEFAULT_SIGNATURE]["inputs"]
        return [_tf_tensor(name, t["dtype"], [int(d["size"]) for d in t["tensor_shape"].get("dim", [])])
                for name, t in sorted(signature.items())]  # fmt: skip
    except (KeyError, TypeError, ValueError) as exc:
        raise EndpointError(f"{url}: unexpected metadata ({type(exc).__name__}: {exc})") from None


def _tf_tensor(name: str, dtype: str, shape: list[int]) -> TensorSpec:
    """A TF Serving signature's input as a TensorSpec; ValueError naming a dtype with no KServe v2 datatype."""
    if dtype not in TF_TO_V2:
        raise ValueError(f"input {name!r} has dtype {dtype}, which benchfleet cannot generate")
    return TensorSpec(name=name, datatype=TF_TO_V2[dtype], shape=shape)


def _grpc_call(target: TargetSpec, method: str, request: Any, answer_type: Any, credentials: Credentials) -> Any:
    """One unary call to the target with its credentials; EndpointRefused for UNAUTHENTICATED or PERMISSION_DENIED,
    EndpointError for any other failure, naming the RPC."""
    address = urlsplit(target.url).netloc
    metadata = tuple((k.lower(), v) for k, v in credentials.headers) or None
    if target.tls:
        roots = credentials.ca_pem.encode() if credentials.ca_pem else None
        channel = grpc.secure_channel(address, grpc.ssl_channel_credentials(roots))
    else:
        channel = grpc.insecure_channel(address)
    name = method.rsplit("/", 1)[-1]
    try:
        call = channel.unary_unary(method, request_serializer=type(request).SerializeToString,
                                   response_deserializer=answer_type.FromString)  # fmt: skip
        return call(request, timeout=METADATA_TIMEOUT_S, metadata=metadata)
    except grpc.RpcError as exc:
        error = EndpointRefused if exc.code() in REFUSED else EndpointError
        hint = " (check target.secret)" if exc.code() in REFUSED else ""
        raise error(f"{target.url}: {name}: {exc.code().name}{hint}: {exc.details()}") from None
    finally:
        channel.close()


def _grpc_signature(target: TargetSpec, model: str, credentials: Credentials) -> list[TensorSpec]:
    name = target.model_name or model
    if target.protocol == "kserve-grpc":
        request = pb.ModelMetadataRequest(name=name, version=target.model_version or "")
        answer = _grpc_call(target, kserve_v2.method_path("ModelMetadata"), request, pb.ModelMetadataResponse, credentials)
        return [TensorSpec(name=t.name, datatype=t.datatype, shape=list(t.shape)) for t in answer.inputs]
    spec = tfserving_api.model_spec(name, target.model_version, signature=None)
    asked = tf_pb.GetModelMetadataRequest(model_spec=spec, metadata_field=["signature_def"])
    answer = _grpc_call(target, tfserving_api.method_path("GetModelMetadata"), asked, tf_pb.GetModelMetadataResponse,
                        credentials)  # fmt: skip
    try:
        signatures = tf_pb.SignatureDefMap.FromString(answer.metadata["signature_def"].value).signature_def
        inputs = signatures[tfserving_api.DEFAULT_SIGNATURE].inputs
        return [_tf_tensor(key, tf_pb.DataType.Name(t.dtype), [int(d.size) for d in t.tensor_shape.dim])
                for key, t in sorted(inputs.items())]  # fmt: skip
    except (KeyError, ValueError) as exc:
        raise EndpointError(f"{target.url}: GetModelMetadata: unexpected metadata ({type(exc).__name__}: {exc})") from None


def grpc_ready(target: TargetSpec, model: str, credentials: Credentials = NO_CREDENTIALS) -> bool:
    """Whether a gRPC endpoint says the model is ready: KServe's ModelReady, TF Serving's GetModelStatus (a version
    AVAILABLE)."""
    name = target.model_name or model
    if target.protocol == "kserve-grpc":
        request = pb.ModelReadyRequest(name=name, version=target.model_version or "")
        return bool(_grpc_call(target, kserve_v2.method_path("ModelReady"), request, pb.ModelReadyResponse, credentials).ready)
    status = tf_pb.GetModelStatusRequest(model_spec=tfserving_api.model_spec(name, target.model_version, signature=None))
    answer = _grpc_call(target, tfserving_api.method_path("GetModelStatus"), status, tf_pb.GetModelStatusResponse,
                        credentials)  # fmt: skip
    return any(v.state == tf_pb.ModelVersionStatus.AVAILABLE for v in answer.model_version_status)


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
        """Until the endpoint says the model is ready (KServe, TF Serving, OpenAI: their own health answers, over HTTP
        or gRPC); 0.0, as no start of ours is timed."""
        t0, last = time.monotonic(), "no answer"
        while time.monotonic() - t0 < timeout_s:
            try:
                if self._ready():
                    self._version = self._describe()
                    return 0.0
                last = "the model is not ready yet"
            except EndpointRefused:
                raise
            except EndpointError as exc:
                last = str(exc)
            time.sleep(0.2)
        raise EndpointError(f"endpoint not ready within {timeout_s:g}s: {last}")

    def _ready(self) -> bool:
        """One readiness question; EndpointError when it goes unanswered."""
        url = self._ready_url()
        if url is None:
            return grpc_ready(self.target, self._model, self.credentials)
        _get(url, self.credentials)  # a 200 is the answer (KServe's readiness has no body to read)
        return True

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
