"""The wire audit: a point's requests and answers read back off its captured packets (follower/host/wirecap.py), each
matched to the client's record of it, and the client's figures held against the same definitions on the wire.

Per connection the two directions are reassembled (in sequence order; a retransmission's bytes counted once, at
their first arrival; bytes that fill a gap become available with the packet that fills it). The client's bytes are
read as HTTP/1.1 requests (head and Content-Length body): a request's wire send is the packet carrying its first
byte. The server's bytes are read by the client's own reader (openai_stream.AnswerReader: head, chunks, server-sent
events; its token-event rule, `event_tokens`): an answer's first byte, each token event at the packet that completes
it, its last byte. The n-th answer on a connection answers its n-th request.

A request begins on the wire with its first packet: the SYN of the connection it opened (its first, where an unanswered
SYN was sent again), else its first byte.
Requests are matched to the client's records connection by connection: the open loop records the local port each
request went out on, and one connection carries one request at a time, so a port's records in the order of their
stamps are its wire requests in the order they left. Records without a port (a driver that does not say) are matched
by order among the wire requests of the ports no record names: the generator stamps a send and writes it at once, on
one thread, so requests leave in the order of their stamps, each at or after its own (a request that must open a
connection first can leave after one stamped just after it that found one open: a record whose pair disagrees trades
with a neighbour where both then agree; after a host stall a burst of such requests can leave many places late, which
only the port pairs exactly). A match is kept only where the answers agree (the client's stamps at or after the wire's,
the same number of token events); the others are counted, never guessed.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from common.stats import quantile
from common.wire.audit import Spread, WireAudit, WireFigure
from follower.host.wirecap import FIN, SYN, Captured, Packet, clock_offset_ns, open_capture
from follower.loadgen.records import LoadRecords
from follower.protocols.transports.http1 import HttpError
from follower.protocols.transports.openai_stream import AnswerReader, event_tokens, text_field
from follower.protocols.transports.sse import DONE, StreamError

# The clock offset's error plus the kernel's own stamping: a client stamp this much before the wire's is still causal.
SLACK_NS = 20_000
MAX_SEND_NS = 1_000_000_000  # a request leaves within a second of its stamp, or it is not that request
NO_WIRE_REQUEST = "no request on the wire within a second of the client's stamp"
NEIGHBOURS = 4  # how far in send order a record whose pair disagrees looks for one to trade with (see match)
# The wall clock moved against the monotonic one by more than this over the point: it was stepped (NTP slews both alike).
STEP_NS = 100_000
_LENGTH = re.compile(rb"\r\ncontent-length:[ \t]*(\d+)", re.IGNORECASE)


@dataclass
class WireAnswer:
    """One answer as the wire carried it (CLOCK_REALTIME ns)."""

    status: int = 0
    first_ns: int = -1
    done_ns: int = -1
    token_ns: list[int] = field(default_factory=list)


@dataclass
class WireRequest:
    """One request as the wire carried it, with its answer once that completed. It begins (`send_ns`) with its first
    packet leaving: the SYN of the connection it opened (`opened`), else its first byte."""

    send_ns: int
    answer: WireAnswer | None = None
    opened: bool = False
    port: int = -1  # the connection's client port


class _Flow:
    """One direction of one connection, reassembled: bytes come out in order with the time they became available."""

    def __init__(self) -> None:
        self.next: int | None = None
        self.pending: dict[int, bytes] = {}

    def add(self, packet: Packet) -> bytes:
        if packet.flags & SYN:
            self.next = (packet.seq + 1) & 0xFFFFFFFF
            return b""
        if not packet.payload:
            return b""
        if self.next is None:
            self.next = packet.seq
        ahead = (packet.seq - self.next) & 0xFFFFFFFF
        if ahead >= 1 << 31:  # behind: a retransmission, perhaps with new bytes at its end
            payload = packet.payload[(self.next - packet.seq) & 0xFFFFFFFF :]
        elif ahead:
            self.pending[packet.seq] = packet.payload
            return b""
        else:
            payload = packet.payload
        out = bytearray(payload)
        self.next = (self.next + len(payload)) & 0xFFFFFFFF
        while self.next in self.pending:
            more = self.pending.pop(self.next)
            out += more
            self.next = (self.next + len(more)) & 0xFFFFFFFF
        return bytes(out)


class _Requests:
    """A connection's client bytes as HTTP/1.1 requests."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.buf = bytearray()
        self.start_ns = -1
        self.body_left = -1  # bytes of the current request's body still to come (-1: its head is not read yet)
        self.sent: list[WireRequest] = []
        self.unreadable = False
        self.syn_ns = -1  # the connection's (first) SYN, for the request that opened it
        self.syn_seq: int | None = None  # its sequence number: a SYN with the same one is a retransmission

    def opened_at(self, ns: int, seq: int) -> None:
        self.syn_ns, self.syn_seq = ns, seq

    def feed(self, data: bytes, ns: int) -> None:
        if self.unreadable or not data:
            return
        if self.start_ns < 0:
            self.start_ns = ns
        self.buf += data
        while self.buf:
            if self.body_left < 0:
                end = self.buf.find(b"\r\n\r\n")
                if end < 0:
                    return
                length = _LENGTH.search(self.buf, 0, end + 2)
                if length is None and not self.buf.startswith((b"GET ", b"HEAD ")):
                    self.unreadable = True  # a body framed otherwise (chunked): not read here
                    return
                self.body_left = int(length.group(1)) if length else 0
                del self.buf[: end + 4]
            take = min(self.body_left, len(self.buf))
            del self.buf[:take]
            self.body_left -= take
            if self.body_left:
                return
            opened = self.syn_ns >= 0 and not self.sent
            self.sent.append(WireRequest(self.syn_ns if opened else self.start_ns, opened=opened, port=self.port))
            self.body_left = -1
            self.start_ns = ns if self.buf else -1


class _Answers:
    """A connection's server bytes as answers, read as the client reads them (openai_stream.AnswerReader)."""

    def __init__(self) -> None:
        self._fresh()
        self.done: list[WireAnswer] = []
        self.unreadable = False

    def _fresh(self) -> None:
        self.reader = AnswerReader()
        self.answer = WireAnswer()
        self.counted = 0

    def feed(self, data: bytes, ns: int) -> None:
        if self.unreadable or not data:
            return
        if self.answer.first_ns < 0:
            self.answer.first_ns = ns
        try:
            for _, event in self.reader.feed(data, ns):
                self._event(event, ns)
        except (HttpError, StreamError):
            self.unreadable = True
            return
        if self.reader.whole:
            self.finish(ns)

    def _event(self, event: bytes, ns: int) -> None:
        if event == DONE:
            return
        tokens = event_tokens(event, text_field(event), self.counted)
        if tokens is not None:
            arrived, self.counted, _ = tokens
            self.answer.token_ns.extend([ns] * arrived)

    def finish(self, ns: int) -> None:
        """The answer is whole (its framing says so, or the connection closed under one framed by the close)."""
        head = self.reader.head
        if head is None:
            return
        self.answer.status, self.answer.done_ns = head[0], ns
        if not self.reader.sse and head[0] == 200 and text_field(bytes(self.reader.body)):
            self.answer.token_ns = [ns]  # a language model's answer not streamed: its text came with its last byte
        self.done.append(self.answer)
        self._fresh()


def wire_requests(captured: Captured) -> list[WireRequest]:
    """Every request the capture holds, its answer attached where one completed, in the order they left."""
    conns: dict[int, tuple[_Flow, _Flow, _Requests, _Answers]] = {}
    finished: list[tuple[_Requests, _Answers]] = []
    for packet in sorted(captured.packets, key=lambda p: p.ns):
        conn = conns.get(packet.client_port)
        syn = bool(packet.flags & SYN and packet.outgoing)
        # A new connection (a port may be used again); a SYN sent again with the same sequence number is the same
        # connection's, retransmitted (its first went unanswered): the request began with the first.
        if conn is None or (syn and conn[2].syn_seq != packet.seq):
            if conn is not None:
                finished.append((conn[2], conn[3]))
            conn = conns[packet.client_port] = (_Flow(), _Flow(), _Requests(packet.client_port), _Answers())
            if syn:
                conn[2].opened_at(packet.ns, packet.seq)
        out, back, requests, answers = conn
        if packet.outgoing:
            requests.feed(out.add(packet), packet.ns)
        else:
            answers.feed(back.add(packet), packet.ns)
            if packet.flags & FIN and answers.reader.framed_by_close:
                answers.finish(packet.ns)
    finished.extend((c[2], c[3]) for c in conns.values())
    every: list[WireRequest] = []
    for requests, answers in finished:
        for request, answer in zip(requests.sent, answers.done, strict=False):
            request.answer = answer
        every.extend(requests.sent)
    every.sort(key=lambda r: r.send_ns)
    return every


def match(
    records: LoadRecords, wire: list[WireRequest], offset_ns: int, why: dict[int, str] | None = None
) -> dict[int, WireRequest]:
    """Each record (by index) the wire request it sent, where their answers agree (see the module's docstring);
    `offset_ns`: the wire's clock minus the records'. A record with its port is paired within that port's requests;
    the others by order among the requests of ports no record names, then a record whose pair disagrees trades pairs
    with one of its NEIGHBOURS either side where both then agree (two requests that left crosswise to their stamps).
    `why`, where given, gets each sent record left unmatched and the reason (`disagreement`, or no wire request)."""
    sent = np.flatnonzero(records.sent_ns >= 0)
    order = sent[np.argsort(records.sent_ns[sent], kind="stable")]
    ports = records.port if len(records.port) == len(records) else np.full(len(records), -1, dtype=np.int32)
    own: dict[int, list[int]] = {}
    for i in order.tolist():
        own.setdefault(int(ports[i]), []).append(i)
    unnamed = own.pop(-1, [])
    on_port: dict[int, list[WireRequest]] = {}
    for request in wire:
        on_port.setdefault(request.port, []).append(request)
    matched: dict[int, WireRequest] = {}
    for port, indices in own.items():
        for i, request in _paired(records, indices, on_port.get(port, []), offset_ns):
            if _agrees(records, i, request.answer, offset_ns):
                matched[i] = request
    pairs = _paired(records, unnamed, [w for w in wire if w.port not in own], offset_ns)
    agree = [_agrees(records, i, request.answer, offset_ns) for i, request in pairs]
    for p, (i, request) in enumerate(pairs):
        for q in range(max(0, p - NEIGHBOURS), min(len(pairs), p + NEIGHBOURS + 1)):
            if agree[p]:
                break
            k, other = pairs[q]
            if q != p and _agrees(records, i, other.answer, offset_ns) and _agrees(records, k, request.answer, offset_ns):
                pairs[p], pairs[q] = (i, other), (k, request)
                agree[p] = agree[q] = True
    matched.update({i: request for (i, request), ok in zip(pairs, agree, strict=True) if ok})
    if why is not None:
        paired = {
            i: request
            for port, indices in own.items()
            for i, request in _paired(records, indices, on_port.get(port, []), offset_ns)
        }
        paired.update(dict(pairs))
        for i in order.tolist():
            if i not in matched:
                pair = paired.get(i)
                why[i] = NO_WIRE_REQUEST if pair is None else disagreement(records, i, pair.answer, offset_ns) or "unexplained"
    return matched


def _paired(records: LoadRecords, order: list[int], wire: list[WireRequest], offset_ns: int) -> list[tuple[int, WireRequest]]:
    """Records (in stamp order) paired in turn with the wire requests (in send order): each with the first that left at
    or after its stamp, within MAX_SEND_NS of it."""
    pairs: list[tuple[int, WireRequest]] = []
    w = 0
    for i in order:
        stamp = int(records.sent_ns[i]) + offset_ns
        while w < len(wire) and wire[w].send_ns < stamp - SLACK_NS:
            w += 1
        if w < len(wire) and wire[w].send_ns - stamp <= MAX_SEND_NS:
            pairs.append((int(i), wire[w]))
            w += 1
    return pairs


def _agrees(records: LoadRecords, i: int, answer: WireAnswer | None, offset_ns: int) -> bool:
    """Whether the client's record of request i tells the same story as the wire's answer."""
    return disagreement(records, i, answer, offset_ns) is None


def disagreement(records: LoadRecords, i: int, answer: WireAnswer | None, offset_ns: int) -> str | None:
    """Where the client's record of request i and the wire's answer part (None: they agree)."""
    if records.status[i] != 200:
        return "the client's answer is not a 200"
    if answer is None or answer.done_ns < 0:
        return "no whole answer on the wire"
    if answer.status != 200:
        return "the wire's answer is not a 200"
    # A byte the client did not stamp (-1: a peer's requests, read from its own report, bench/wire.py) is not held.
    first, done = int(records.first_byte_ns[i]), int(records.done_ns[i])
    if first >= 0 and first + offset_ns < answer.first_ns - SLACK_NS:
        return "the client stamped the first byte before the wire carried it"
    if done >= 0 and done + offset_ns < answer.done_ns - SLACK_NS:
        return "the client stamped the last byte before the wire carried it"
    if records.llm is None:
        return None
    times = records.llm.token_times[i]
    if times is None or len(times) != len(answer.token_ns):
        return "a different number of token events"
    return None


def _spread(values_ns: Iterable[int]) -> Spread | None:
    values = np.fromiter(values_ns, dtype=np.int64)
    if not len(values):
        return None
    us = values / 1e3
    return Spread(count=len(us), p50=quantile(us, 0.5), p99=quantile(us, 0.99), max=float(us.max()))


def _figure(name: str, client_ns: list[int], wire_ns: list[int]) -> WireFigure | None:
    if not client_ns:
        return None
    client, wire = np.asarray(client_ns) / 1e6, np.asarray(wire_ns) / 1e6
    return WireFigure(
        name=name,
        count=len(client),
        client_p50=quantile(client, 0.5),
        client_p99=quantile(client, 0.99),
        wire_p50=quantile(wire, 0.5),
        wire_p99=quantile(wire, 0.99),
    )


def audit(captured: Captured, records: LoadRecords, offset_ns: int, window: tuple[int, int]) -> WireAudit:
    """The audit of the requests intended within `window` (monotonic ns, the measured part), from the whole run's
    packets; `offset_ns`: CLOCK_REALTIME minus the records' monotonic clock."""
    wire = wire_requests(captured)
    why: dict[int, str] = {}
    matched = match(records, wire, offset_ns, why)
    lo, hi = window
    measured = [int(i) for i in np.flatnonzero((records.intended_ns >= lo) & (records.intended_ns < hi) & (records.sent_ns >= 0))]
    send, receive, done, tokens = [], [], [], []
    defs: dict[str, tuple[list[int], list[int]]] = {k: ([], []) for k in ("latency", "ttft", "ttft_intended", "itl")}
    agreed = 0
    unmatched_why: dict[str, int] = {}
    for i in measured:
        request = matched.get(i)  # matched only where the answers agree
        if request is None:
            reason = why.get(i, "unexplained")
            unmatched_why[reason] = unmatched_why.get(reason, 0) + 1
            continue
        answer = request.answer
        assert answer is not None
        agreed += 1
        sent, wire_send = int(records.sent_ns[i]), request.send_ns - offset_ns
        send.append(wire_send - sent)
        receive.append(int(records.first_byte_ns[i]) + offset_ns - answer.first_ns)
        done.append(int(records.done_ns[i]) + offset_ns - answer.done_ns)
        defs["latency"][0].append(int(records.done_ns[i]) - sent)
        defs["latency"][1].append(answer.done_ns - request.send_ns)
        times = records.llm.token_times[i] if records.llm is not None else None
        if times is None or not len(times):
            continue
        on_wire = np.asarray(answer.token_ns, dtype=np.int64) - offset_ns
        tokens.extend((times - on_wire).tolist())
        defs["ttft"][0].append(int(times[0]) - sent)
        defs["ttft"][1].append(int(on_wire[0]) - wire_send)
        defs["ttft_intended"][0].append(int(times[0] - records.intended_ns[i]))
        defs["ttft_intended"][1].append(int(on_wire[0] - records.intended_ns[i]))
        defs["itl"][0].extend(np.diff(times).tolist())
        defs["itl"][1].extend(np.diff(on_wire).tolist())
    figures = [f for name, (c, w) in defs.items() if (f := _figure(name, c, w)) is not None]
    return WireAudit(
        ran=True,
        interface=captured.interface,
        packets=len(captured.packets),
        drops=captured.drops,
        truncated=captured.truncated,
        wire_requests=len(wire),
        matched=agreed,
        unmatched=len(measured) - agreed,
        unmatched_why=unmatched_why,
        send_us=_spread(send),
        receive_us=_spread(receive),
        done_us=_spread(done),
        token_us=_spread(tokens),
        figures=figures,
    )


class WireTap:
    """A point's wire audit: the capture opened before its run, stopped after it (also on failure), then audited."""

    def __init__(self, url: str) -> None:
        opened = open_capture(url)
        self.why_not = opened if isinstance(opened, str) else None
        self._capture = None if isinstance(opened, str) else opened.start()
        self._captured: Captured | None = None
        self.offset_ns = clock_offset_ns()

    def stop(self) -> None:
        if self._capture is not None and self._captured is None:
            self._captured = self._capture.stop()

    def audit(self, records: LoadRecords, window: tuple[int, int]) -> WireAudit:
        """The audit of the measured requests (`window`: their intended times, monotonic ns)."""
        self.stop()
        if self._captured is None:
            return WireAudit(ran=False, why_not=self.why_not)
        if abs(clock_offset_ns() - self.offset_ns) > STEP_NS:
            stepped = "the wall clock was stepped during the point: the wire's stamps cannot be compared"
            return WireAudit(ran=False, why_not=stepped)
        return audit(self._captured, records, self.offset_ns, window)
