"""The wire audit's reader on packets made here: TCP reassembled (out of order, retransmitted, a gap filled later),
HTTP/1.1 requests framed by their length, chunked event streams split anywhere, token events counted by the client's
own rule (empty text, several tokens an event), a port used again by a new connection, and the capture's parser
keeping each loopback packet once."""

from __future__ import annotations

import struct

import numpy as np

from follower.host.wirecap import PACKET_HOST, PACKET_OUTGOING, SYN, Captured, Packet, parse
from follower.loadgen.records import LoadRecords
from follower.loadgen.wireaudit import audit, wire_requests

PORT = 8000
REQUEST = b'POST /v1/completions HTTP/1.1\r\nHost: h\r\nContent-Length: 4\r\n\r\n{"a"'


def _chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


def _stream(events: list[bytes]) -> bytes:
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    body = b"".join(_chunk(b"data: " + e + b"\n\n") for e in events) + _chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n"
    return head + body


def _token(text: str, **extra: object) -> bytes:
    fields = "".join(f', "{k}": {v}' for k, v in extra.items())
    return f'{{"choices": [{{"index": 0, "text": "{text}", "finish_reason": null}}]{fields}}}'.encode()


class _Conn:
    """Makes one connection's packets: client port, sequence numbers, times."""

    def __init__(self, port: int) -> None:
        self.port, self.out, self.back = port, 1000, 50_000

    def syn(self, ns: int) -> list[Packet]:
        return [Packet(ns, True, self.port, self.out - 1, SYN, b""), Packet(ns, False, self.port, self.back - 1, SYN | 0x10, b"")]

    def send(self, ns: int, data: bytes) -> Packet:
        packet = Packet(ns, True, self.port, self.out, 0x18, data)
        self.out += len(data)
        return packet

    def answer(self, ns: int, data: bytes) -> Packet:
        packet = Packet(ns, False, self.port, self.back, 0x18, data)
        self.back += len(data)
        return packet


def test_a_stream_split_anywhere_out_of_order_and_retransmitted_reads_as_the_client_reads_it() -> None:
    conn = _Conn(40000)
    events = [_token("a"), _token(""), _token("b"), _token("cd", usage='{"completion_tokens": 5}')]
    stream = _stream(events)
    cut = [stream.index(b"data: ") + 3, stream.index(events[1]) + 5, stream.index(events[2]) + 2, stream.index(events[3])]
    pieces = [stream[a:b] for a, b in zip([0, *cut], [*cut, len(stream)], strict=True)]
    packets = [*conn.syn(0), conn.send(100, REQUEST[:30]), conn.send(110, REQUEST[30:])]
    answers = [conn.answer(1000 * (k + 1), piece) for k, piece in enumerate(pieces)]
    # The third piece arrives before the second (a gap, filled at 2000+); the first is sent again.
    answers[1], answers[2] = answers[2], answers[1]
    answers[1] = Packet(2000, False, conn.port, answers[1].seq, answers[1].flags, answers[1].payload)
    answers[2] = Packet(2500, False, conn.port, answers[2].seq, answers[2].flags, answers[2].payload)
    retransmit = Packet(2600, False, conn.port, answers[0].seq, 0x18, answers[0].payload)
    (request,) = wire_requests(Captured(packets=[*packets, *answers, retransmit]))
    assert (request.send_ns, request.opened) == (0, True) and request.answer is not None  # it began with its SYN
    answer = request.answer
    assert answer.status == 200 and answer.first_ns == 1000 and answer.done_ns == 5000
    # Each event at the packet that completes it: the first two when the gap filled (2500), the third with the next
    # piece, the last with the final one; the empty-text event is a token; the last says 5 tokens in all: it brings two.
    assert answer.token_ns == [2500, 2500, 4000, 5000, 5000], answer.token_ns


def test_requests_on_a_kept_alive_connection_and_a_port_used_again_are_each_answered_in_turn() -> None:
    first, again = _Conn(40001), _Conn(40001)
    again.out, again.back = 7000, 90_000
    ok = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"
    packets = [*first.syn(0), first.send(10, REQUEST), first.answer(20, ok), first.send(30, REQUEST), first.answer(40, ok[:5])]
    packets += [first.answer(45, ok[5:]), *again.syn(50), again.send(60, REQUEST), again.answer(70, ok)]
    requests = wire_requests(Captured(packets=packets))
    # A connection's first request begins with its SYN; the next with its own first byte.
    assert [(r.send_ns, r.opened, r.answer and (r.answer.first_ns, r.answer.done_ns)) for r in requests] == [
        (0, True, (20, 20)),
        (30, False, (40, 45)),
        (50, True, (70, 70)),
    ]


def test_records_are_matched_in_send_order_and_an_answer_that_disagrees_is_not_counted() -> None:
    us = 1000  # ns
    conns = [_Conn(41000 + k) for k in range(3)]
    ok = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"
    packets = []
    for k, conn in enumerate(conns):  # connections already open (no SYN in the capture)
        packets += [conn.send((1000 + 100 * k) * us, REQUEST), conn.answer((5000 + 100 * k) * us, ok)]
    records = LoadRecords.allocate(0, np.array([990, 1090, 1190], dtype=np.int64) * us)
    records.sent_ns[:] = np.array([995, 1095, 1195]) * us  # each stamped 5 µs before its bytes left
    records.first_byte_ns[:] = np.array([5003, 5103, 4000]) * us  # the third claims its answer before the wire had it
    records.done_ns[:] = np.array([5004, 5104, 5225]) * us
    records.status[:] = 200
    result = audit(Captured(packets=packets, interface="lo"), records, 0, (0, 10_000 * us))
    assert (result.matched, result.unmatched, result.wire_requests) == (2, 1, 3)
    assert result.unmatched_why == {"the client stamped the first byte before the wire carried it": 1}
    assert result.send_us is not None and result.send_us.p50 == 5.0
    assert result.receive_us is not None and result.receive_us.max == 3.0
    latency = result.figure("latency")
    assert latency is not None and latency.count == 2 and latency.wire_p50 == 4.0  # ms, from the first byte leaving


def test_two_requests_that_left_crosswise_to_their_stamps_are_each_paired_with_their_own() -> None:
    us = 1000  # ns
    opening, kept = _Conn(42000), _Conn(42001)
    ok = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"
    # The first stamped (1000 µs) opened a connection: its SYN left at 1200 µs, after the second's bytes (1105 µs) on a
    # connection already open. The second was answered first (3900-4000 µs), the first later (4800-5000 µs).
    packets = [*opening.syn(1200 * us), opening.send(1250 * us, REQUEST), opening.answer(4800 * us, ok[:5])]
    packets += [opening.answer(5000 * us, ok[5:]), kept.send(1105 * us, REQUEST), kept.answer(3900 * us, ok[:5])]
    packets += [kept.answer(4000 * us, ok[5:])]
    records = LoadRecords.allocate(0, np.array([990, 1090], dtype=np.int64) * us)
    records.sent_ns[:] = np.array([1000, 1100]) * us
    records.first_byte_ns[:] = np.array([4801, 3901]) * us
    records.done_ns[:] = np.array([5002, 4002]) * us
    records.status[:] = 200
    result = audit(Captured(packets=packets, interface="lo"), records, 0, (0, 10_000 * us))
    # Paired by order alone the first would take the second's wire request and the second would disagree with the first's.
    assert (result.matched, result.unmatched, result.wire_requests) == (2, 0, 2)
    assert result.send_us is not None and sorted([result.send_us.p50, result.send_us.max]) == [5.0, 200.0]
    latency = result.figure("latency")
    assert latency is not None and latency.count == 2 and (latency.wire_p50, latency.wire_p99) == (2.895, 3.8)  # ms


def test_a_request_overtaken_by_a_burst_after_a_stall_is_paired_by_its_connection() -> None:
    us = 1000  # ns
    opening, kept = _Conn(43000), [_Conn(43001 + k) for k in range(5)]
    ok = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"
    # After a stall six requests were due at once. The first found no idle connection: its SYN left at 1600 µs, after
    # the five stamped after it had left (1105-1505 µs) on connections already open. Answers came in the order they left.
    packets = [*opening.syn(1600 * us), opening.send(1650 * us, REQUEST), opening.answer(9000 * us, ok)]
    for k, conn in enumerate(kept):
        packets += [conn.send((1105 + 100 * k) * us, REQUEST), conn.answer((4000 + 1000 * k) * us, ok)]
    records = LoadRecords.allocate(0, np.full(6, 900, dtype=np.int64) * us)
    records.sent_ns[:] = np.array([1000, 1100, 1200, 1300, 1400, 1500]) * us
    records.first_byte_ns[:] = np.array([9001, 4001, 5001, 6001, 7001, 8001]) * us
    records.done_ns[:] = records.first_byte_ns + 1 * us
    records.status[:] = 200
    captured = Captured(packets=packets, interface="lo")
    # By order alone the first record takes the second's request, each next one its successor's: a rotation no trade
    # between neighbours undoes, and the answers disagree.
    records.port = np.zeros(0, dtype=np.int32)
    assert audit(captured, records, 0, (0, 20_000 * us)).matched < 6
    # The open loop records each request's connection: every request is paired with its own.
    records.port = np.array([43000, 43001, 43002, 43003, 43004, 43005], dtype=np.int32)
    result = audit(captured, records, 0, (0, 20_000 * us))
    assert (result.matched, result.unmatched, result.wire_requests) == (6, 0, 6)
    assert result.send_us is not None and result.send_us.max == 600.0  # the first left with its SYN, 600 µs late


def _datagram(sport: int, dport: int, payload: bytes) -> bytes:
    tcp = struct.pack("!HHIIBBHHH", sport, dport, 7, 0, 5 << 4, 0x18, 65535, 0, 0)
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(tcp) + len(payload), 0, 0, 64, 6, 0, bytes(4), bytes(4))
    return ip + tcp + payload


def test_each_loopback_packet_is_kept_once_on_its_own_side() -> None:
    to_server, to_client = _datagram(40000, PORT, b"req"), _datagram(PORT, 40000, b"ans")
    assert parse(to_server, 1, PACKET_OUTGOING, PORT) == Packet(1, True, 40000, 7, 0x18, b"req")
    assert parse(to_server, 2, PACKET_HOST, PORT) is None  # the same packet arriving at the server
    assert parse(to_client, 3, PACKET_HOST, PORT) == Packet(3, False, 40000, 7, 0x18, b"ans")
    assert parse(to_client, 4, PACKET_OUTGOING, PORT) is None  # the server's packet leaving
    assert parse(_datagram(1, 2, b"x"), 5, PACKET_HOST, PORT) is None  # another port's


def test_each_unmatched_request_says_why() -> None:
    us = 1000  # ns
    conns = [_Conn(42000 + k) for k in range(4)]
    ok = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"
    packets = [conns[0].send(1000 * us, REQUEST), conns[0].answer(5000 * us, ok)]
    packets += [conns[1].send(1100 * us, REQUEST), conns[1].answer(5100 * us, ok)]
    packets += [conns[2].send(1200 * us, REQUEST), conns[2].answer(5200 * us, ok[:10])]  # its answer never completes
    # The fourth request left more than a second after its stamp (the generator stalled between them).
    packets += [conns[3].send(2_400_000 * us, REQUEST), conns[3].answer(2_405_000 * us, ok)]
    records = LoadRecords.allocate(0, np.array([990, 1090, 1190, 1290], dtype=np.int64) * us)
    records.sent_ns[:] = np.array([995, 1095, 1195, 1295]) * us
    records.port[:] = [c.port for c in conns]
    records.first_byte_ns[:] = np.array([5003, 5103, 5203, 2_405_003]) * us
    records.done_ns[:] = np.array([5004, 5050, 5204, 2_405_004]) * us  # the second claims its last byte early
    records.status[:] = 200
    result = audit(Captured(packets=packets, interface="lo"), records, 0, (0, 10_000 * us))
    assert (result.matched, result.unmatched) == (1, 3)
    assert result.unmatched_why == {
        "the client stamped the last byte before the wire carried it": 1,
        "no whole answer on the wire": 1,
        "no request on the wire within a second of the client's stamp": 1,
    }


def test_a_request_whose_syn_was_sent_again_began_with_the_first() -> None:
    us = 1000  # ns
    conn = _Conn(43000)
    ok = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"
    syn, syn_ack = conn.syn(1000 * us)
    # The first SYN went unanswered (a full accept queue drops it); the kernel sent it again a second later.
    again = Packet(1_001_000 * us, True, conn.port, syn.seq, SYN, b"")
    answered = Packet(1_001_100 * us, False, conn.port, syn_ack.seq, syn_ack.flags, b"")
    packets = [syn, again, answered, conn.send(1_001_200 * us, REQUEST), conn.answer(1_005_000 * us, ok)]
    (request,) = wire_requests(Captured(packets=packets))
    assert (request.send_ns, request.opened) == (1000 * us, True)
    records = LoadRecords.allocate(0, np.array([990], dtype=np.int64) * us)
    records.sent_ns[:] = 995 * us
    records.port[:] = conn.port
    records.first_byte_ns[:] = 1_005_003 * us
    records.done_ns[:] = 1_005_004 * us
    records.status[:] = 200
    result = audit(Captured(packets=packets, interface="lo"), records, 0, (0, 2_000_000 * us))
    assert (result.matched, result.unmatched) == (1, 0), result.unmatched_why
    assert result.send_us is not None and result.send_us.p50 == 5.0  # from the stamp to the first SYN


def test_a_peers_records_that_stamp_no_bytes_are_matched_by_their_sends() -> None:
    # bench/wire.py matches a peer's requests (read from its own report: when each left, its token times) to the wire's
    # as the audit matches benchfleet's; a peer stamps no first or last byte (-1), which is not held against the wire.
    us = 1000
    conns = [_Conn(42000 + k) for k in range(2)]
    ok = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"
    packets = []
    for k, conn in enumerate(conns):
        packets += [conn.send((1000 + 100 * k) * us, REQUEST), conn.answer((5000 + 100 * k) * us, ok)]
    records = LoadRecords.allocate(0, np.array([990, 1090], dtype=np.int64) * us)
    records.sent_ns[:] = np.array([995, 1095]) * us
    records.status[:] = 200
    result = audit(Captured(packets=packets, interface="lo"), records, 0, (0, 10_000 * us))
    assert (result.matched, result.unmatched) == (2, 0), result.unmatched_why
