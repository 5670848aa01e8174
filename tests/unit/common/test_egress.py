"""Where a target may point (common/egress.py): the clouds' metadata services and link-local addresses are refused in
every spelling at submission, an address literal has one spelling, and the follower checks what a name resolves to
just before it first contacts the endpoint."""

from __future__ import annotations

import socket
from typing import Any

import pytest

from common import egress
from common.errors import InvalidSpec
from common.spec.parse import parse_spec
from common.spec.target import TargetSpec
from follower.backends.endpoint import EndpointBackend
from follower.protocols import EndpointError, EndpointRefused

REFUSED = [
    "http://169.254.169.254/latest",  # AWS, GCP, Azure metadata
    "http://169.254.169.254.:80",
    "http://2852039166/",  # 169.254.169.254 as one number
    "http://0xa9fea9fe/",
    "http://0251.0376.0251.0376/",  # octal
    "http://169.254.43518/",
    "http://[fd00:ec2::254]/",  # AWS over IPv6
    "http://[::ffff:169.254.169.254]/",
    "http://[fe80::1]:8000/",
    "http://100.100.100.200/",  # Alibaba
    "http://metadata.google.internal/computeMetadata/v1",
    "http://METADATA.google.internal./",
    "http://metadata/",
    "http://instance-data/",
    "http://0.0.0.0:8000/",
    "http://[::]:8000/",
    "http://2130706433:8000/",  # 127.0.0.1, spelled otherwise
    "http://0x7f000001:8000/",
    "http://127.1:8000/",
    "http://017700000001:8000/",
]


@pytest.mark.parametrize("url", REFUSED)
def test_a_target_at_a_metadata_service_link_local_or_an_odd_spelling_is_refused_at_submission(url: str) -> None:
    spec = {"name": "ssrf", "model": "m:1", "target": {"url": url, "protocol": "kserve-http"}, "load": {"rate": 10}}
    with pytest.raises(InvalidSpec) as caught:
        parse_spec(spec)
    assert caught.value.field == "target.url", caught.value.message
    assert "no target may point at it" in caught.value.message or "write it so" in caught.value.message


def test_canonical_addresses_and_names_are_taken() -> None:
    for url in ("http://127.0.0.1:8000", "http://[::1]:8000", "http://10.1.2.3:8000", "https://models.example.com"):
        assert TargetSpec(url=url, protocol="kserve-http").url == url


def test_the_follower_refuses_a_name_that_resolves_to_a_denied_address_before_contacting_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A name that was fine at submission may resolve to the metadata service by the time the follower runs the job
    (DNS rebinding): the follower resolves it just before the first contact and refuses, never connecting."""
    resolved: list[str] = []

    def resolver(host: str, port: int | None, family: int = 0, type: int = 0, proto: int = 0, flags: int = 0) -> list[Any]:  # noqa: A002 - getaddrinfo's names
        resolved.append(host)
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("169.254.169.254", port or 80))]

    def no_connection(self: socket.socket, address: object) -> None:
        raise AssertionError("a denied address was contacted")

    monkeypatch.setattr(egress.socket, "getaddrinfo", resolver)
    monkeypatch.setattr(socket.socket, "connect", no_connection)
    backend = EndpointBackend(TargetSpec(url="http://rebinds.example:8000", protocol="kserve-http"))
    with pytest.raises(EndpointRefused, match=r"rebinds.example resolves to 169.254.169.254 is in 169.254.0.0/16"):
        backend.wait_ready(timeout_s=5)
    assert resolved == ["rebinds.example"]


def test_a_failed_answer_is_reported_by_its_status_and_a_model_servers_error_only() -> None:
    """Aimed at a service that is not a model server, a target once read back up to 300 characters of its answer: the
    status and a model server's own `error` are kept, any other body left out."""
    from httpx import Response

    from follower.protocols.calls import _said

    assert _said(Response(404, text="redis_version:7.0.15\r\nrole:master\r\n")) == ""
    assert _said(Response(500, json={"error": "model m is not loaded"})) == ": model m is not loaded"
    assert _said(Response(422, json={"detail": "x" * 500})) == ": " + "x" * 200
    assert _said(Response(500, json=["not", "an", "object"])) == ""


def test_an_endpoint_that_is_not_ready_is_asked_less_and_less_often(monkeypatch: pytest.MonkeyPatch) -> None:
    """A target aimed at a service that is not a model server was asked about 4 times a second for 120 s. Asked after
    0.2 s, then twice as long each time up to every 5 s, and once more at the deadline (a clock seam: no real time)."""
    import follower.backends.endpoint as endpoint_module

    now = [0.0]
    asked: list[float] = []

    class NeverReady:
        def ready(self, *args: Any) -> bool:
            asked.append(now[0])
            return False

    monkeypatch.setattr(endpoint_module.time, "monotonic", lambda: now[0])
    monkeypatch.setattr(endpoint_module.time, "sleep", lambda s: now.__setitem__(0, now[0] + s))
    backend = EndpointBackend(TargetSpec(url="http://127.0.0.1:9", protocol="kserve-http"))
    backend.protocol = NeverReady()  # type: ignore[assignment]
    with pytest.raises(EndpointError, match="endpoint not ready within 30s: the model is not ready yet"):
        backend.wait_ready(timeout_s=30)
    assert asked == pytest.approx([0.0, 0.2, 0.6, 1.4, 3.0, 6.2, 11.2, 16.2, 21.2, 26.2, 30.0])
