"""The packets of a point's own connections, each with the kernel's timestamp: the wire a wire audit holds the client's
clock against (follower/loadgen/wireaudit.py).

A packet socket (AF_PACKET, SOCK_DGRAM: packets without their link header, of every protocol: only such a socket
is shown outgoing packets) with SO_TIMESTAMPNS gets the time the
kernel's packet tap saw each packet: for an outgoing packet, as the device queues it for transmission; for an
incoming one, as the device hands it up, before any socket reads it. A classic BPF filter keeps only TCP to or from
the server's port, so the kernel copies nothing else. On loopback each packet passes the tap twice (out, then in):
the client's packets are kept as they leave (PACKET_OUTGOING), the server's as they arrive (PACKET_HOST), as on any
other interface. It needs CAP_NET_RAW (root); without it `open_capture` says so and nothing is captured.

The stamps are CLOCK_REALTIME; `clock_offset_ns` gives the offset onto the generator's monotonic clock. Capturing
runs on a thread of the agent, off the generator's core: the kernel stamps the packet, not the thread that reads it,
so a late read delays nothing but its own copy (the socket's buffer is sized for a point's burst, and the kernel's
count of dropped packets is reported).
"""

from __future__ import annotations

import ctypes
import socket
import struct
import subprocess
import threading
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

ETH_P_ALL = 0x0003  # every protocol: only such a socket sees outgoing packets too (the tap's ptype_all)
SO_TIMESTAMPNS = 35  # also the control message's type (SCM_TIMESTAMPNS)
SO_ATTACH_FILTER = 26
SO_RCVBUFFORCE = 33
SOL_PACKET = 263
PACKET_STATISTICS = 6
PACKET_HOST, PACKET_OUTGOING = 0, 4
RCVBUF = 64 << 20
MAX_PACKET = 1 << 18  # loopback's segments can reach 64 KiB and more with offload
MAX_PACKETS = 1_000_000  # a point's capture stops keeping packets past this (said, never silent)
ANCILLARY = socket.CMSG_SPACE(16)  # room for the kernel's receive timestamp (struct timespec)
DRAIN_S = 1.0  # the most a stop spends reading what the kernel already held
SYN, FIN, RST = 0x02, 0x01, 0x04


@dataclass(frozen=True, slots=True)
class Packet:
    """One TCP segment of the point's connections: the kernel's time (CLOCK_REALTIME ns), whether the client sent
    it, the client's port (which connection), the sequence number, TCP flags and payload."""

    ns: int
    outgoing: bool
    client_port: int
    seq: int
    flags: int
    payload: bytes


@dataclass
class Captured:
    """What a capture kept, and what the kernel says it could not copy."""

    packets: list[Packet] = field(default_factory=list)
    drops: int = 0
    truncated: bool = False  # more packets than MAX_PACKETS: the rest were not kept
    interface: str = ""


SKF_AD_PKTTYPE = 0xFFFFF004  # SKF_AD_OFF + SKF_AD_PKTTYPE: the packet's type, as a classic BPF load sees it


def port_filter(port: int) -> bytes:
    """A classic BPF program run by the kernel on every packet: IPv4 TCP to `port` as it leaves (PACKET_OUTGOING) or
    from `port` as it arrives (PACKET_HOST), whole; anything else dropped before it is copied (on loopback, each
    packet's other side too: half the copies)."""
    program = [
        (0x30, 0, 0, 9),  # 0 ldb [9]: the IP protocol
        (0x15, 0, 10, 6),  # 1 jeq #6 (TCP), else drop
        (0xB1, 0, 0, 0),  # 2 ldxb 4*([0]&0xf): the IP header's length
        (0x48, 0, 0, 2),  # 3 ldh [x+2]: the destination port
        (0x15, 0, 2, port),  # 4 jeq #port, else to 7
        (0x20, 0, 0, SKF_AD_PKTTYPE),  # 5 ld the packet's type
        (0x15, 4, 5, PACKET_OUTGOING),  # 6 jeq outgoing: keep, else drop
        (0x48, 0, 0, 0),  # 7 ldh [x+0]: the source port
        (0x15, 0, 3, port),  # 8 jeq #port, else drop
        (0x20, 0, 0, SKF_AD_PKTTYPE),  # 9 ld the packet's type
        (0x15, 0, 1, PACKET_HOST),  # 10 jeq host: keep, else drop
        (0x06, 0, 0, MAX_PACKET),  # 11 ret: keep the whole packet
        (0x06, 0, 0, 0),  # 12 ret 0: drop
    ]
    return b"".join(struct.pack("HBBI", *ins) for ins in program)


def parse(datagram: bytes, ns: int, pkttype: int, port: int) -> Packet | None:
    """One captured IPv4 packet as a Packet of the server's connections (None: not one of them, or the copy of a
    loopback packet on its other side)."""
    if len(datagram) < 40 or datagram[0] >> 4 != 4 or datagram[9] != 6:
        return None
    ihl = (datagram[0] & 0xF) * 4
    total = int.from_bytes(datagram[2:4], "big") or len(datagram)  # 0 under segmentation offload: the datagram's own
    sport, dport, seq = struct.unpack_from("!HHI", datagram, ihl)
    offset, flags = datagram[ihl + 12] >> 4, datagram[ihl + 13]
    if dport == port and pkttype == PACKET_OUTGOING:
        outgoing, client = True, sport
    elif sport == port and pkttype == PACKET_HOST:
        outgoing, client = False, dport
    else:
        return None
    return Packet(ns, outgoing, client, seq, flags, datagram[ihl + offset * 4 : min(total, len(datagram))])


def clock_offset_ns(tries: int = 9) -> int:
    """CLOCK_REALTIME minus CLOCK_MONOTONIC, from the tightest of a few paired readings (within a microsecond)."""
    best: tuple[int, int] | None = None
    for _ in range(tries):
        before = time.monotonic_ns()
        real = time.time_ns()
        after = time.monotonic_ns()
        if best is None or after - before < best[0]:
            best = (after - before, real - (before + after) // 2)
    assert best is not None
    return best[1]


def interface_for(host: str) -> str | None:
    """The interface the kernel routes `host` through (loopback for a local address; a sandboxed server's veth), so
    each packet is seen once; None (every interface) where the route cannot be asked."""
    try:
        address = socket.gethostbyname(host)
    except OSError:
        return None
    if address.startswith("127."):
        return "lo"
    try:
        route = subprocess.run(["ip", "-o", "route", "get", address], capture_output=True, text=True, timeout=5).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    words = route.split()
    return words[words.index("dev") + 1] if "dev" in words[:-1] else None


class WireCapture:
    """Captures one point's packets on a thread; `stop` returns them."""

    def __init__(self, sock: socket.socket, port: int, interface: str) -> None:
        self._sock, self._port = sock, port
        self._stop = threading.Event()
        self._captured = Captured(interface=interface)
        self._thread = threading.Thread(target=self._loop, name="wire-capture", daemon=True)

    def start(self) -> WireCapture:
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                received = self._sock.recvmsg(MAX_PACKET, ANCILLARY)
            except TimeoutError:
                continue
            except OSError:
                return
            self._keep(*received)

    def _keep(self, data: bytes, ancdata: list[tuple[int, int, bytes]], _flags: int, address: Any) -> None:
        ns = 0
        for level, kind, value in ancdata:
            if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(value) >= 16:
                seconds, nanos = struct.unpack_from("qq", value)
                ns = seconds * 1_000_000_000 + nanos
        packet = parse(data, ns or time.time_ns(), address[2], self._port)
        if packet is None:
            return
        if len(self._captured.packets) >= MAX_PACKETS:
            self._captured.truncated = True
            return
        self._captured.packets.append(packet)

    def _drain(self) -> None:
        """Read what the kernel already holds for the socket: packets that crossed the wire before the stop but that a
        busy host had not let the thread read yet (the last answers' final bytes; closing the socket lost them, and
        their requests went unmatched). Bounded in time: packets arriving meanwhile are after the point."""
        self._sock.setblocking(False)
        deadline = time.monotonic() + DRAIN_S
        while time.monotonic() < deadline:
            try:
                received = self._sock.recvmsg(MAX_PACKET, ANCILLARY)
            except OSError:  # BlockingIOError: nothing left
                return
            self._keep(*received)

    def stop(self) -> Captured:
        """Stop capturing (after the point's last answer), keep what the kernel still held, and return what was kept."""
        self._stop.set()
        if self._thread.ident is not None:  # started
            self._thread.join(timeout=2.0)
        if not self._thread.is_alive():
            self._drain()
        try:
            stats = self._sock.getsockopt(SOL_PACKET, PACKET_STATISTICS, 8)
            self._captured.drops = struct.unpack("II", stats)[1]
        except OSError:
            pass
        self._sock.close()
        return self._captured


def open_capture(url: str) -> WireCapture | str:
    """A capture of the connections to the server at `url` (plain HTTP), ready to start; or why there can be none."""
    parts = urlsplit(url)
    if parts.scheme != "http" or parts.hostname is None:
        return f"a wire audit reads HTTP/1.1 off the wire: {parts.scheme}:// is not plain HTTP"
    port = parts.port or 80
    interface = interface_for(parts.hostname)
    try:
        sock = socket.socket(socket.AF_PACKET, socket.SOCK_DGRAM, socket.htons(ETH_P_ALL))
    except PermissionError:
        return "capturing packets needs CAP_NET_RAW (the follower runs without it)"
    except OSError as exc:
        return f"this host cannot open a packet socket ({exc})"
    try:
        program = port_filter(port)
        instructions = ctypes.create_string_buffer(program)
        fprog = struct.pack("HL", len(program) // 8, ctypes.addressof(instructions))
        sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, fprog)
        sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        try:
            sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, RCVBUF)
        except OSError:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RCVBUF)
        if interface is not None:
            sock.bind((interface, ETH_P_ALL))
        sock.settimeout(0.05)
        sock.getsockopt(SOL_PACKET, PACKET_STATISTICS, 8)  # reset the kernel's counts: drops from here on
    except OSError as exc:
        sock.close()
        return f"this host cannot capture on a packet socket ({exc})"
    return WireCapture(sock, port, interface or "all")
