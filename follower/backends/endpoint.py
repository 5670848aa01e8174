"""An endpoint the team already runs, behind the Backend protocol: nothing is started or stopped, readiness is the
endpoint's own answer and the model's signature is read from its metadata, both asked through its protocol
(follower/protocols/) with the target's credentials."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from common import egress
from common.spec.target import ENDPOINT, TargetSpec
from common.wire.models import ModelMeta, TensorSpec
from common.wire.results import Conversion
from follower.backends.llmserver import parse_metrics
from follower.protocols import NO_CREDENTIALS, PROTOCOLS, Credentials, Endpoint, EndpointError, EndpointRefused

# An endpoint not ready yet is asked again after 0.2 s, then twice as long each time, at most every 5 s.
READY_POLL_FIRST_S = 0.2
READY_POLL_MAX_S = 5.0


def target_endpoint(target: TargetSpec, model: str) -> Endpoint:
    """The target as an endpoint of its protocol, for `model` (the job's model name; the target may rename it)."""
    return Endpoint(target.protocol, target.url, target.model_name or model, target.model_version)


def pin(target: TargetSpec, credentials: Credentials, policy: egress.Policy) -> Credentials:
    """The credentials with the address every connection to the target goes to: its name resolved now and every address
    checked (common/egress.py), before the endpoint is first contacted; EndpointRefused (never retried) naming the
    address when one is refused, so a name that resolved elsewhere at submission is caught here and never contacted."""
    parts = urlsplit(target.url)
    port = parts.port or {"http": 80, "https": 443, "grpc": 80, "grpcs": 443}.get(parts.scheme, 80)
    try:
        addresses = egress.check_resolved(parts.hostname or "", port, policy)
    except ValueError as exc:
        raise EndpointRefused(f"{target.url}: {exc}") from None
    return replace(credentials, address=str(addresses[0]))


def _checked(target: TargetSpec, credentials: Credentials) -> None:
    """EndpointRefused unless the credentials carry the address `pin` checked: nothing is contacted before its check."""
    if credentials.address is None:
        raise EndpointRefused(f"{target.url}: its address was not checked before contacting it")


def read_signature(target: TargetSpec, model: str, credentials: Credentials) -> list[TensorSpec] | None:
    """The model's inputs as the endpoint describes them; None for a protocol without metadata (OpenAI)."""
    _checked(target, credentials)
    return PROTOCOLS[target.protocol].signature(target_endpoint(target, model), credentials)


class EndpointBackend:
    """A target as a backend: start and stop do nothing; ready when the endpoint says it serves the model."""

    name = ENDPOINT

    def __init__(self, target: TargetSpec, credentials: Credentials = NO_CREDENTIALS) -> None:
        self.target, self.credentials = target, credentials
        self.protocol = PROTOCOLS[target.protocol]
        self.extra_env: dict[str, str] = {}
        self.conversion: Conversion | None = None  # an endpoint serves what it serves: nothing is converted
        self._endpoint = target_endpoint(target, "")
        self._version = f"{target.protocol} endpoint"

    @classmethod
    def available(cls) -> tuple[bool, str]:
        return True, "drives an endpoint it does not start"

    def version(self) -> str:
        return self._version

    def start(self, model_path: Path, model: ModelMeta, workdir: Path) -> None:
        self._endpoint = target_endpoint(self.target, model.name)  # nothing to start: the endpoint runs already

    def wait_ready(self, timeout_s: float) -> float:
        """Until the endpoint says the model is ready (its protocol's own health answer, over HTTP or gRPC); 0.0, as
        no start of ours is timed."""
        _checked(self.target, self.credentials)
        deadline, last, pause = time.monotonic() + timeout_s, "no answer", READY_POLL_FIRST_S
        while True:
            try:
                if self.protocol.ready(self._endpoint, self.credentials):
                    self._version = self.protocol.describe(self._endpoint, self.credentials) or self._version
                    return 0.0
                last = "the model is not ready yet"
            except EndpointRefused:
                raise
            except EndpointError as exc:
                last = str(exc)
            left = deadline - time.monotonic()
            if left <= 0:
                raise EndpointError(f"endpoint not ready within {timeout_s:g}s: {last}")
            time.sleep(min(pause, left))  # the last ask falls on the deadline
            pause = min(pause * 2, READY_POLL_MAX_S)  # backed off: a target that is not a model server is not hammered

    @property
    def endpoint(self) -> str:
        return self.target.url

    def serves(self, model: ModelMeta) -> Endpoint:
        return target_endpoint(self.target, model.name)

    def pid(self) -> int | None:
        return None  # no process of ours

    def log_tail(self, n_lines: int = 40) -> str:
        return ""

    def alive(self) -> bool:
        return True  # not ours to watch: an endpoint that stops answering shows as errors in the records

    def stats(self) -> dict[str, Any]:
        """The endpoint's own metrics where its protocol's servers publish them (an OpenAI-compatible server's
        /metrics: vLLM's prefix-cache hits, its TTFT histogram...), read like a started server's, at the address `pin`
        checked; none for a sharded point (every shard's load is in them) or an endpoint that keeps none."""
        if self.target.shards.count != 1 or self.credentials.address is None:
            return {}
        try:
            text = self.protocol.server_metrics(self._endpoint, self.credentials)
        except EndpointError:
            return {}
        return {"metrics": parse_metrics(text)} if text else {}

    def stop(self) -> None:
        return None
