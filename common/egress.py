"""Where a job's target may point: addresses no target may be (link-local, the clouds' metadata services), addresses
only an admin may open to a team (loopback, private and other non-public ranges), the fleet's own services (never),
and the one spelling an address literal must have.

Checked on the URL at submission (the spelling and the denied names and addresses in common/spec/target.py, a literal
outside the team's allow-list by the leader), and again by the follower on every address the name resolves to just
before it first contacts the endpoint; the follower then connects to the address it checked, never resolving the
name again (so a name cannot rebind between the check and the load). A refused address is never contacted."""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable
from dataclasses import dataclass

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network

# The instance-metadata services of the clouds (credentials live there) and every link-local address.
DENIED_NETWORKS = tuple(
    ipaddress.ip_network(n)
    for n in (
        "169.254.0.0/16",  # link-local: AWS, GCP, Azure, OpenStack metadata at 169.254.169.254
        "fe80::/10",  # IPv6 link-local
        "fd00:ec2::254/128",  # AWS metadata over IPv6
        "100.100.100.200/32",  # Alibaba Cloud metadata
        "0.0.0.0/8",  # "this network": reaches the host itself on most systems
        "::/128",
    )
)
DENIED_NAMES = frozenset({"metadata", "metadata.google.internal", "metadata.goog", "instance-data", "instance-data.ec2.internal"})
# Names every resolver answers with loopback (RFC 6761): judged as 127.0.0.1 at submission.
LOOPBACK_NAMES = ("localhost",)
MAX_ALLOWED = 64  # networks in one allow-list
HOW_TO_ALLOW = (
    "an admin allows such addresses for a team (PUT /api/v1/teams/TEAM egress_allow, `benchfleet teams set TEAM "
    "--allow NETWORK`) or for every team (BENCHFLEET_LEADER_EGRESS_ALLOW)"
)


def network(text: str) -> Network:
    """An allow-list entry (an address or a network, host bits ignored: 10.1.2.3/8 is 10.0.0.0/8); ValueError naming it
    when it is neither, when it is every address, or when it lies inside what no target may be. (Where an entry holds a
    denied address, as 100.64.0.0/10 holds Alibaba's metadata service, the denial still wins.)"""
    try:
        net = ipaddress.ip_network(text.strip(), strict=False)
    except ValueError:
        raise ValueError(f"{text!r} is not an address or a network (e.g. 10.0.0.0/8, 127.0.0.1, fd00::/8)") from None
    if net.prefixlen == 0:
        raise ValueError(f"{net} is every address: name the non-public networks the team's endpoints are in")
    for denied_net in DENIED_NETWORKS:
        if net.version == denied_net.version and net.subnet_of(denied_net):  # type: ignore[arg-type]
            raise ValueError(f"{net} is in {denied_net} (link-local or a cloud metadata service): no target may be there")
    return net


def networks(texts: Iterable[str]) -> tuple[Network, ...]:
    """Allow-list entries parsed (see `network`)."""
    return tuple(network(t) for t in texts)


def literal(host: str) -> Address | None:
    """The address a host part spells, in any form a resolver would take (2130706433, 0x7f000001, 127.1, [::1]);
    None for a name."""
    bare = host.strip("[]").rstrip(".")
    try:
        return ipaddress.ip_address(bare)
    except ValueError:
        pass
    try:
        return ipaddress.IPv4Address(socket.inet_aton(bare))  # the legacy forms inet_aton (and so connect) accepts
    except OSError:
        return None


def refusal(host: str) -> str | None:
    """Why a target's host part is refused as written, for every team (a denied name or address, or an address spelled
    in a form other than its canonical one); None if it may be used."""
    name = host.strip("[]").rstrip(".").lower()
    if name in DENIED_NAMES:
        return f"{host} is a cloud metadata service: no target may point at it"
    address = literal(host)
    if address is None:
        return None
    if str(address) != name:
        return f"{host} spells the address {address}: write it so"
    return denied(address)


def _unmapped(address: Address) -> Address:
    """An IPv4-mapped IPv6 address as the IPv4 address it reaches."""
    mapped = address.ipv4_mapped if isinstance(address, ipaddress.IPv6Address) else None
    return mapped or address


def denied(address: Address) -> str | None:
    """Why no target may be this address (link-local or a metadata service); None if it may."""
    for candidate in {address, _unmapped(address)}:
        for net in DENIED_NETWORKS:
            if candidate in net:
                return f"{address} is in {net} (link-local or a cloud metadata service): no target may point at it"
    return None


def restricted(address: Address, allow: tuple[Network, ...]) -> str | None:
    """Why a team may not reach this address: it is not public (loopback, private, shared or reserved) and no
    allow-list entry holds it; None if it is public or allowed."""
    reached = _unmapped(address)
    if reached.is_global and not reached.is_multicast:
        return None
    if any(reached.version == net.version and reached in net for net in allow):
        return None
    kind = "loopback" if reached.is_loopback else "private or reserved"
    return f"{address} is a {kind} address and the team's allow-list does not hold it: {HOW_TO_ALLOW}"


def team_refusal(host: str, allow: tuple[Network, ...]) -> str | None:
    """Why a team may not name this host at submission (the leader's check: a literal outside the allow-list, or a
    loopback name); a name is judged again by the follower on what it resolves to."""
    name = host.strip("[]").rstrip(".").lower()
    if name in LOOPBACK_NAMES or name.endswith(".localhost"):
        return restricted(ipaddress.IPv4Address("127.0.0.1"), allow)
    address = literal(host)
    return None if address is None else restricted(address, allow)


@dataclass(frozen=True)
class Policy:
    """What the follower running a target job may reach: the team's allow-list (from the leader) and the fleet's own
    services (host, port), which no target may be even where the allow-list holds their addresses."""

    allow: tuple[Network, ...] = ()
    fleet: tuple[tuple[str, int], ...] = ()

    def fleet_addresses(self) -> list[tuple[Address, int]]:
        """The fleet's services' addresses as they resolve now, with their ports."""
        out = []
        for host, port in self.fleet:
            try:
                infos = socket.getaddrinfo(host.strip("[]"), port, type=socket.SOCK_STREAM)
            except socket.gaierror:
                continue
            out += [(_unmapped(ipaddress.ip_address(str(i[4][0]).split("%", 1)[0])), port) for i in infos]
        return out

    @staticmethod
    def fleet_service(address: Address, port: int, services: list[tuple[Address, int]]) -> bool:
        """Whether (address, port) reaches one of the fleet's `services` (fleet_addresses): the same address, or any
        loopback address or an unspecified one on this host, at its port."""
        reached = _unmapped(address)
        for service, service_port in services:
            if service_port != port:
                continue
            if service == reached or service.is_unspecified or (service.is_loopback and reached.is_loopback):
                return True
        return False


def check_resolved(host: str, port: int, policy: Policy) -> list[Address]:
    """The addresses `host` resolves to now, every one checked (the follower calls it just before it first contacts a
    target, and connects to these only); ValueError naming the address if any is denied, outside the team's
    allow-list, or one of the fleet's own services, and when the name does not resolve."""
    if (why := refusal(host)) is not None:
        raise ValueError(why)
    try:
        infos = socket.getaddrinfo(host.strip("[]"), port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise ValueError(f"{host} does not resolve: {exc.strerror}") from None
    addresses: list[Address] = []
    services = policy.fleet_addresses()
    for info in infos:
        address = ipaddress.ip_address(str(info[4][0]).split("%", 1)[0])
        if (why := denied(address) or restricted(address, policy.allow)) is not None:
            raise ValueError(f"{host} resolves to {why}")
        if policy.fleet_service(address, port, services):
            raise ValueError(f"{host}:{port} resolves to {address}:{port}, one of the fleet's own services: no target may be")
        if address not in addresses:
            addresses.append(address)
    return addresses
