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
from follower.backends.endpoint import EndpointBackend, pin
from follower.protocols import EndpointError, EndpointRefused
from follower.protocols.transports import NO_CREDENTIALS, Credentials

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
    target = TargetSpec(url="http://rebinds.example:8000", protocol="kserve-http")
    with pytest.raises(EndpointRefused, match=r"rebinds.example resolves to 169.254.169.254 is in 169.254.0.0/16"):
        pin(target, NO_CREDENTIALS, egress.Policy(allow=LOOPBACK))
    assert resolved == ["rebinds.example"]
    # Nothing is contacted unchecked: an endpoint without a checked address refuses before its first call.
    with pytest.raises(EndpointRefused, match="its address was not checked"):
        EndpointBackend(target).wait_ready(timeout_s=5)


LOOPBACK = egress.networks(["127.0.0.0/8", "::1"])
# Addresses a team reaches only where an admin's allow-list holds them (with the twenty refused for every team above,
# the twenty-four spellings and more).
NON_PUBLIC = [
    "127.0.0.1",
    "127.0.0.2",
    "[::1]",
    "localhost",
    "api.localhost",
    "10.0.0.7",
    "172.16.5.4",
    "192.168.1.1",
    "100.64.0.1",  # shared address space (carrier NAT)
    "[fd12:3456::1]",  # IPv6 unique local
    "[::ffff:10.0.0.7]",  # IPv4-mapped
    "198.18.0.1",  # benchmarking range
    "240.0.0.1",  # reserved
]


NON_PUBLIC_NETWORKS = ["127.0.0.0/8", "::1", "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "fc00::/7"]
NON_PUBLIC_NETWORKS += ["198.18.0.0/15", "240.0.0.0/4"]


@pytest.mark.parametrize("host", NON_PUBLIC)
def test_loopback_private_and_reserved_addresses_need_the_teams_allow_list(host: str) -> None:
    why = egress.team_refusal(host, ())
    assert why is not None and "allow-list does not hold it" in why and "benchfleet teams set" in why, why
    everything = egress.networks(NON_PUBLIC_NETWORKS)
    assert egress.team_refusal(host, everything) is None
    assert egress.team_refusal(host, egress.networks(["203.0.113.0/24"])) is not None  # another network opens nothing here


def test_public_addresses_and_names_need_no_allow_list() -> None:
    for host in ("8.8.8.8", "[2001:4860:4860::8888]", "models.example.com", "10.example.com"):
        assert egress.team_refusal(host, ()) is None, host


def test_an_allow_list_never_opens_link_local_a_metadata_service_or_everything() -> None:
    from pydantic import ValidationError

    from common.wire.teams import TeamSettings

    assert TeamSettings(egress_allow=["10.1.2.3/8", "::1", "127.0.0.1"]).egress_allow == ["10.0.0.0/8", "::1/128", "127.0.0.1/32"]
    for entry in ("169.254.0.0/16", "169.254.169.254", "0.0.0.0/0", "::/0", "fe80::/64", "100.100.100.200", "nonsense"):
        with pytest.raises(ValidationError, match="egress_allow"):
            TeamSettings(egress_allow=[entry])
    with pytest.raises(ValidationError):
        TeamSettings(egress_allow=[f"10.0.{i}.0/24" for i in range(egress.MAX_ALLOWED + 1)])


def _listening() -> socket.socket:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.setblocking(False)
    return listener


def _accepted(listener: socket.socket) -> int:
    count = 0
    while True:
        try:
            conn, _ = listener.accept()
        except BlockingIOError:
            return count
        conn.close()
        count += 1


def test_at_connect_a_name_resolving_outside_the_allow_list_or_to_a_fleet_service_is_refused_and_never_contacted() -> None:
    """`localhost` resolves (really) to loopback: refused for a team without loopback in its list, and where loopback is
    allowed, still refused when the port is one of the fleet's own services; the listening socket saw no connection."""
    listener = _listening()
    port = listener.getsockname()[1]
    target = TargetSpec(url=f"http://localhost:{port}", protocol="kserve-http")
    try:
        with pytest.raises(EndpointRefused, match="loopback address and the team's allow-list does not hold it"):
            pin(target, NO_CREDENTIALS, egress.Policy())
        with pytest.raises(EndpointRefused, match="one of the fleet's own services"):
            pin(target, NO_CREDENTIALS, egress.Policy(allow=LOOPBACK, fleet=(("127.0.0.1", port),)))
        with pytest.raises(EndpointRefused, match="one of the fleet's own services"):  # a service on every interface
            pin(target, NO_CREDENTIALS, egress.Policy(allow=LOOPBACK, fleet=(("0.0.0.0", port),)))
        assert _accepted(listener) == 0
        pinned = pin(target, NO_CREDENTIALS, egress.Policy(allow=LOOPBACK, fleet=(("127.0.0.1", port + 1),)))
        assert pinned.address in ("127.0.0.1", "::1")
    finally:
        listener.close()


def test_a_checked_name_is_never_resolved_again_every_transport_connects_to_the_checked_address(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """DNS rebinding after the check: the name resolves to an allowed address when the follower checks it, then to the
    metadata service. The readiness call, the raw HTTP transport and aiohttp's still reach the checked address (a real
    server on it), with the name kept in Host."""
    import asyncio
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from follower.protocols import calls
    from follower.protocols.transports.aiohttp_client import AiohttpTransport
    from follower.protocols.transports.rawhttp import RawHttpTransport

    hosts: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            hosts.append(self.headers["Host"])
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")

        do_GET = do_POST = _answer

        def log_message(self, *args: Any) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    port = server.server_address[1]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    real = socket.getaddrinfo
    answer = {"rebind.test": "127.0.0.1"}

    def resolver(host: str, *args: Any, **kwargs: Any) -> list[Any]:
        if host in answer:
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (answer[host], port))]
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", resolver)
    url = f"http://rebind.test:{port}"
    try:
        pinned = pin(TargetSpec(url=url, protocol="kserve-http"), NO_CREDENTIALS, egress.Policy(allow=LOOPBACK))
        answer["rebind.test"] = "169.254.169.254"  # rebound after the check
        assert calls.get(f"{url}/v2/health/ready", pinned).status_code == 200

        async def through(transport_type: type) -> int:
            async with transport_type(f"{url}/v2/models/m/infer", max_concurrency=1, timeout_s=5, credentials=pinned) as t:
                return (await t.request(t.encode(b"{}"))).status  # type: ignore[no-any-return]

        assert asyncio.run(through(RawHttpTransport)) == 200
        assert asyncio.run(through(AiohttpTransport)) == 200
    finally:
        server.shutdown()
        server.server_close()
    assert hosts == [f"rebind.test:{port}"] * 3


def test_a_grpc_channel_goes_to_the_checked_address_under_the_urls_authority() -> None:
    assert NO_CREDENTIALS.grpc_channel("models.example:8001") == ("models.example:8001", [])
    target, options = Credentials(address="10.0.0.7").grpc_channel("models.example:8001")
    assert target == "ipv4:10.0.0.7:8001"
    assert options == [("grpc.default_authority", "models.example:8001"), ("grpc.ssl_target_name_override", "models.example")]
    assert Credentials(address="fd12::1").grpc_channel("[fd12::1]:8001")[0] == "ipv6:[fd12::1]:8001"


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
    backend = EndpointBackend(TargetSpec(url="http://127.0.0.1:9", protocol="kserve-http"), Credentials(address="127.0.0.1"))
    backend.protocol = NeverReady()  # type: ignore[assignment]
    with pytest.raises(EndpointError, match="endpoint not ready within 30s: the model is not ready yet"):
        backend.wait_ready(timeout_s=30)
    assert asked == pytest.approx([0.0, 0.2, 0.6, 1.4, 3.0, 6.2, 11.2, 16.2, 21.2, 26.2, 30.0])
