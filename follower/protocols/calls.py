"""The one-off calls protocols make besides the load (readiness, metadata, a server's self-description): an HTTP GET
or a unary gRPC call with a target's credentials, and the errors they end in."""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import grpc
import httpx

from follower.protocols.base import Endpoint
from follower.protocols.transports import Credentials

METADATA_TIMEOUT_S = 10.0
REFUSED = (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED)


class EndpointError(RuntimeError):
    """The endpoint did not answer as its protocol says it should (the reason names the URL and what came back)."""


class EndpointRefused(EndpointError):
    """The endpoint refused our credentials (401, 403): asking again will not help."""


def get(url: str, credentials: Credentials) -> httpx.Response:
    """A 200 answer to GET `url`; EndpointRefused for 401/403, EndpointError for anything else."""
    return _call("GET", url, credentials)


def get_json(url: str, credentials: Credentials) -> Any:
    """The JSON of a 200 answer to GET `url` (EndpointError when it is not JSON)."""
    return _json(url, get(url, credentials))


def post_json(url: str, body: bytes, credentials: Credentials, *, timeout_s: float = METADATA_TIMEOUT_S) -> Any:
    """The JSON of a 200 answer to POST `body` (JSON) to `url` within `timeout_s`; EndpointRefused for 401/403,
    EndpointError otherwise."""
    return _json(url, _call("POST", url, credentials, body, timeout_s=timeout_s))


# A pass of many one-off calls (a quality check's answers) keeps one connection: the client `session` opened.
_SESSION: contextvars.ContextVar[tuple[Credentials, httpx.Client] | None] = contextvars.ContextVar("calls", default=None)


@contextlib.contextmanager
def session(credentials: Credentials) -> Iterator[None]:
    """Within it, this thread's calls with `credentials` share one HTTP client (its connections kept open) instead of
    a client and a connection each."""
    with _client(credentials) as client:
        token = _SESSION.set((credentials, client))
        try:
            yield
        finally:
            _SESSION.reset(token)


def _client(credentials: Credentials) -> httpx.Client:
    verify: Any = credentials.ssl_context()
    return httpx.Client(timeout=METADATA_TIMEOUT_S, verify=verify, follow_redirects=False)


def _call(
    method: str, url: str, credentials: Credentials, body: bytes | None = None, *, timeout_s: float = METADATA_TIMEOUT_S
) -> httpx.Response:
    headers = dict(credentials.headers) if body is None else {**dict(credentials.headers), "Content-Type": "application/json"}
    parts = urlsplit(url)
    to, extensions = url, {}
    if credentials.address is not None and parts.hostname:  # to the checked address; the name in Host and TLS
        at = f"[{credentials.address}]" if ":" in credentials.address else credentials.address
        to = urlunsplit(parts._replace(netloc=at + (f":{parts.port}" if parts.port else "")))
        headers["Host"] = parts.netloc
        extensions = {"sni_hostname": parts.hostname}
    shared = _SESSION.get()
    try:
        if shared is not None and shared[0] == credentials:
            response = shared[1].request(method, to, content=body, headers=headers, extensions=extensions, timeout=timeout_s)
        else:
            with _client(credentials) as client:
                response = client.request(method, to, content=body, headers=headers, extensions=extensions, timeout=timeout_s)
    except httpx.HTTPError as exc:
        raise EndpointError(f"{url}: {type(exc).__name__}: {exc}") from None
    if response.status_code in (401, 403):
        raise EndpointRefused(f"{url}: HTTP {response.status_code} (check target.secret){_said(response)}")
    if response.status_code != 200:
        raise EndpointError(f"{url}: HTTP {response.status_code}{_said(response)}")
    return response


def _said(response: httpx.Response) -> str:
    """What a failed answer said, as a model server says it: the `error` (or `detail`) string of a JSON object, cut
    short. Any other body is left out: a target pointed at a service that is not a model server must not read that
    service back to the user."""
    try:
        doc = response.json() if len(response.content) <= 64 * 1024 else None
    except ValueError:
        return ""
    said = next((doc[k] for k in ("error", "detail", "message") if isinstance(doc, dict) and isinstance(doc.get(k), str)), "")
    return f": {said[:200]}" if said else ""


def _json(url: str, response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        raise EndpointError(f"{url}: the answer is not JSON") from None


def unary(endpoint: Endpoint, method: str, request: Any, answer_type: Any, credentials: Credentials) -> Any:
    """One unary gRPC call to the endpoint with its credentials; EndpointRefused for UNAUTHENTICATED or
    PERMISSION_DENIED, EndpointError for any other failure, naming the RPC."""
    metadata = tuple((k.lower(), v) for k, v in credentials.headers) or None
    target, options = credentials.grpc_channel(endpoint.address)
    if endpoint.tls:
        roots = credentials.ca_pem.encode() if credentials.ca_pem else None
        channel = grpc.secure_channel(target, grpc.ssl_channel_credentials(roots), options=options)
    else:
        channel = grpc.insecure_channel(target, options=options)
    name = method.rsplit("/", 1)[-1]
    try:
        call = channel.unary_unary(
            method, request_serializer=type(request).SerializeToString, response_deserializer=answer_type.FromString
        )
        return call(request, timeout=METADATA_TIMEOUT_S, metadata=metadata)
    except grpc.RpcError as exc:
        error = EndpointRefused if exc.code() in REFUSED else EndpointError
        hint = " (check target.secret)" if exc.code() in REFUSED else ""
        raise error(f"{endpoint.base}: {name}: {exc.code().name}{hint}: {exc.details()}") from None
    finally:
        channel.close()
