"""The load generator's one transport interface: how a request body reaches a server and how its answer comes back.

The timing loop (follower.loadgen.openloop) and the closed loop know schedules, the in-flight cap and records; a
transport knows one wire. Each transport encodes a body once before the run (`encode`), starts a request the moment
it is due (`begin`, the answer reported to a `Reply` on the event loop) or sends one and waits (`request`), and keeps
its own connections sized by the generator's in-flight cap. A new protocol (a streaming one, say) is one more
subclass here, with no fork in the timing loop. Modelled on httpx's transports (`httpx/_transports/`).
"""

from __future__ import annotations

import asyncio
import functools
import ssl
import time
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import orjson

_PARAMS_KEY = b'"parameters":'


@dataclass(frozen=True)
class Credentials:
    """What a target asks of every request: headers (a secret's, e.g. Authorization) and how its TLS certificate is
    checked. Its repr names the headers, never their values (it travels in kwargs that a traceback may print)."""

    headers: tuple[tuple[str, str], ...] = ()
    verify: bool = True
    ca_pem: str | None = None
    # The address the target's name was checked to resolve to (common/egress.py): every connection goes there, the
    # name is never resolved again (the URL's name still goes in Host, the TLS server name and gRPC's authority).
    address: str | None = None

    def __repr__(self) -> str:
        return (
            f"Credentials(headers={[h for h, _ in self.headers]}, verify={self.verify}, ca={self.ca_pem is not None}, "
            f"address={self.address})"
        )

    def grpc_channel(self, netloc: str) -> tuple[str, list[tuple[str, Any]]]:
        """(the channel target, its options) for a gRPC endpoint at `netloc`: at the checked address, the authority and
        the TLS name still the URL's."""
        if self.address is None:
            return netloc, []
        host, _, port = netloc.rpartition(":")
        bare = host.strip("[]")
        scheme = "ipv6" if ":" in self.address else "ipv4"
        at = f"[{self.address}]" if ":" in self.address else self.address
        return f"{scheme}:{at}:{port}", [("grpc.default_authority", netloc), ("grpc.ssl_target_name_override", bare)]

    def ssl_context(self) -> ssl.SSLContext:
        """The TLS context for an https:// or grpcs:// target: the system's CAs or the bundle, checked unless told not
        (made once per bundle and choice: loading the system's CAs takes ~50 ms, which a pass of one-off calls, such as
        a quality check's thousands of answers, would pay on every call)."""
        return _ssl_context(self.ca_pem, self.verify)


@functools.lru_cache(maxsize=32)
def _ssl_context(ca_pem: str | None, verify: bool) -> ssl.SSLContext:
    context = ssl.create_default_context(cadata=ca_pem) if ca_pem else ssl.create_default_context()
    if not verify:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


NO_CREDENTIALS = Credentials()


@dataclass(frozen=True, slots=True)
class Stream:
    """What a language model's answer carried: when each token event arrived (monotonic ns; is_token_event in
    openai_stream.py), the text (its JSON escapes still in: unescaped after the run, off the hot path), and the
    server's own token counts (its `usage`)."""

    events_ns: list[int]
    text: bytes
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    events: int = 0  # every data event, with or without text


@dataclass(frozen=True, slots=True)
class Answer:
    """A server's answer: the status (200 = answered; HTTP codes or their gRPC equivalents), when its first and last
    bytes arrived (monotonic ns), the server's stage timings in ns if it sent any, a short error text when not 200,
    and for a language model what its stream carried."""

    status: int
    first_ns: int
    done_ns: int
    stages: Mapping[str, Any] | None = None
    error: str | None = None
    stream: Stream | None = None


class Reply(Protocol):
    """Where a started request's events go, on the event loop: `sent` when it leaves, `via` the connection it went on
    (where the transport knows it), then `answered` or `failed` once."""

    def sent(self, ns: int) -> None: ...

    def via(self, port: int) -> None: ...

    def answered(self, answer: Answer) -> None: ...

    def failed(self, exc: BaseException) -> None: ...


class Transport(ABC):
    """One wire to one target; made per run, closed after it."""

    #: The exceptions that mean "no answer" (refused, reset, malformed, timed out): recorded as transport errors.
    errors: tuple[type[BaseException], ...] = (TimeoutError, OSError)

    def __init__(self, url: str, *, max_concurrency: int, timeout_s: float, credentials: Credentials = NO_CREDENTIALS) -> None:
        self.url, self.max_concurrency, self.timeout_s = url, max_concurrency, timeout_s
        self.credentials = credentials
        self._tasks: set[asyncio.Task[None]] = set()

    def encode(self, body: bytes) -> Any:
        """A body in this transport's ready-to-send form (built once per body before the run)."""
        return body

    @abstractmethod
    async def request(self, encoded: Any) -> Answer:
        """Send one request and wait for its answer; raises one of `errors` when none comes."""

    def begin(self, encoded: Any, reply: Reply) -> None:
        """Start one request now; its outcome goes to `reply`. By default a task per request runs `request`."""
        task = asyncio.get_running_loop().create_task(self._complete(encoded, reply))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _complete(self, encoded: Any, reply: Reply) -> None:
        reply.sent(time.monotonic_ns())
        try:
            answer = await self.request(encoded)
        except self.errors as exc:
            reply.failed(exc)
            return
        reply.answered(answer)

    async def abort(self) -> None:
        """Stop waiting for requests still in flight (the run is over); their replies are not called."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    @abstractmethod
    async def close(self) -> None:
        """Close every connection."""

    async def __aenter__(self) -> Transport:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


def stage_timings(payload: bytes) -> dict[str, Any] | None:
    """The "parameters" object of a KServe v2 JSON answer, parsing only the tail when it is last (benchfleet's server)."""
    at = payload.rfind(_PARAMS_KEY)
    if at < 0:
        return None
    try:
        # Cheap path: our server writes "parameters" last, so the tensors need not be parsed on the client.
        params = orjson.loads(payload[at + len(_PARAMS_KEY) : -1])
    except orjson.JSONDecodeError:
        try:
            params = orjson.loads(payload).get("parameters")
        except (orjson.JSONDecodeError, AttributeError):
            return None
    return params if isinstance(params, dict) else None


def http_answer(status: int, first_ns: int, payload: bytes) -> Answer:
    """The Answer of an HTTP response read whole just now: stage timings from a 200's parameters, else the error body."""
    done_ns = time.monotonic_ns()
    if status == 200:
        return Answer(200, first_ns, done_ns, stage_timings(payload))
    return Answer(status, first_ns, done_ns, None, f"HTTP {status}: {payload[:300].decode('utf-8', 'replace')}")
