"""Where a job's target may point: addresses no target may be (link-local, the clouds' metadata services) and the one
spelling an address literal must have. Checked on the URL at submission (common/spec/target.py) and again by the
follower on every address the name resolves to, just before it first contacts the endpoint (a name may resolve
elsewhere by then); a denied address is never contacted.

Loopback and private ranges are still allowed: an admin's allow-list for them (per team) is not built yet."""

from __future__ import annotations

import ipaddress
import socket

Address = ipaddress.IPv4Address | ipaddress.IPv6Address

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
    """Why a target's host part is refused as written (a denied name or address, or an address spelled in a form other
    than its canonical one); None if it may be used."""
    name = host.strip("[]").rstrip(".").lower()
    if name in DENIED_NAMES:
        return f"{host} is a cloud metadata service: no target may point at it"
    address = literal(host)
    if address is None:
        return None
    if str(address) != name:
        return f"{host} spells the address {address}: write it so"
    return denied(address)


def denied(address: Address) -> str | None:
    """Why no target may be this address (link-local or a metadata service); None if it may."""
    mapped = address.ipv4_mapped if isinstance(address, ipaddress.IPv6Address) else None
    for candidate in (address, mapped) if mapped else (address,):
        for network in DENIED_NETWORKS:
            if candidate in network:
                return f"{address} is in {network} (link-local or a cloud metadata service): no target may point at it"
    return None


def check_resolved(host: str, port: int | None) -> None:
    """ValueError naming the address if `host` resolves (now) to any denied one; the follower calls it before it first
    contacts a target. A name that does not resolve is left to the connection to report."""
    if (why := refusal(host)) is not None:
        raise ValueError(why)
    try:
        infos = socket.getaddrinfo(host.strip("[]"), port, type=socket.SOCK_STREAM)
    except socket.gaierror:
        return
    for info in infos:
        address = ipaddress.ip_address(str(info[4][0]).split("%", 1)[0])
        if (why := denied(address)) is not None:
            raise ValueError(f"{host} resolves to {why}")
