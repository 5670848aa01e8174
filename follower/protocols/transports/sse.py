"""Server-sent events off the wire, incrementally: the bytes of a streamed HTTP answer go in as they arrive, each
with its arrival time, and every event comes out stamped with the time of the bytes that completed it.

The OpenAI-compatible streaming APIs (vLLM, SGLang, TensorRT-LLM, llama.cpp) send one `data: {json}` event per
engine step and end with `data: [DONE]`. An event's JSON is not decoded here: a token event costs a scan for its
blank-line terminator and a slice (the hot path of a generator sustaining tens of thousands of events a second);
the events a caller needs to read (the usage at the end) it decodes itself.

Chunked transfer encoding is undone on the way in (a chunk boundary may fall anywhere, even inside a chunk's size
line), and an event may span any number of network reads.
"""

from __future__ import annotations

DONE = b"[DONE]"


class StreamError(ValueError):
    """The stream's framing is broken (a bad chunk size, an over-long event)."""


class Dechunker:
    """Undoes chunked transfer encoding incrementally: `feed` returns the payload bytes the input completes."""

    __slots__ = ("_buf", "_left", "finished")

    def __init__(self) -> None:
        self._buf = bytearray()
        # payload bytes left in the current chunk (-1: expecting a size line; -2: its CRLF; -3: after the last chunk,
        # its trailer lines, if any, and the blank line that ends the answer)
        self._left = -1
        self.finished = False  # the zero-size last chunk and the blank line after it arrived

    @property
    def idle(self) -> bool:
        """Nothing held back, and the next byte starts a chunk's size line."""
        return not self._buf and self._left == -1 and not self.finished

    def feed(self, data: bytes) -> bytes:
        if not self._buf and self._left == -1 and not self.finished:
            fast = self._whole_chunks(data)
            if fast is not None:
                return fast
        buf = self._buf
        buf += data
        out = bytearray()
        at = 0
        while not self.finished:
            if self._left == -1:
                end = buf.find(b"\r\n", at)
                if end < 0:
                    if len(buf) - at > 1024:
                        raise StreamError("chunk size line over 1 KiB")
                    break
                size = _chunk_size(bytes(buf[at:end]))
                at = end + 2
                self._left = size if size else -3
            elif self._left == -3:
                # The answer ends at the blank line after the last chunk (and its trailers, not payload): a server
                # may send it apart from the zero-size chunk, and it must not be taken for the next answer's start.
                end = buf.find(b"\r\n", at)
                if end < 0:
                    if len(buf) - at > 1024:
                        raise StreamError("chunked trailer line over 1 KiB")
                    break
                self.finished = end == at
                at = end + 2
            elif self._left == -2:
                if len(buf) - at < 2:
                    break
                if buf[at : at + 2] != b"\r\n":
                    raise StreamError("chunk not followed by CRLF")
                at += 2
                self._left = -1
            else:
                take = min(self._left, len(buf) - at)
                if take == 0:
                    break
                out += buf[at : at + take]
                at += take
                self._left -= take
                if self._left == 0:
                    self._left = -2
        del buf[:at]
        return bytes(out)

    def _whole_chunks(self, data: bytes) -> bytes | None:
        """The fast path of a read that starts at a chunk boundary and holds only whole chunks (the usual read of a
        streamed token: one chunk, one event): their payload, or None to take the general path."""
        parts: list[bytes] = []
        at, n = 0, len(data)
        while at < n:
            end = data.find(b"\r\n", at, at + 1026)
            if end < 0:
                return None
            size = _chunk_size(data[at:end])
            if size == 0:
                if data[end + 2 :] != b"\r\n":  # the blank line not here yet, or trailers: the general path
                    return None
                self.finished = True
                break
            stop = end + 2 + size
            if stop + 2 > n or data[stop : stop + 2] != b"\r\n":
                return None
            parts.append(data[end + 2 : stop])
            at = stop + 2
        return parts[0] if len(parts) == 1 else b"".join(parts)


def _chunk_size(line: bytes) -> int:
    try:
        return int(line.split(b";", 1)[0].strip(), 16)
    except ValueError:
        raise StreamError(f"malformed chunk size {line[:40]!r}") from None


class SseParser:
    """Splits a server-sent event stream into the `data` of each event, stamped with its completing bytes' time."""

    __slots__ = ("_buf", "_scan", "max_event")

    def __init__(self, max_event: int = 1 << 20) -> None:
        self._buf = bytearray()
        self._scan = 0  # where to resume looking for an event's end
        self.max_event = max_event

    @property
    def idle(self) -> bool:
        """Nothing held back: the next byte starts an event."""
        return not self._buf

    def feed(self, data: bytes, ns: int) -> list[tuple[int, bytes]]:
        """The events `data` completes, as (ns, data field) in order; comments and other fields are skipped."""
        if not self._buf and data.endswith(b"\n\n") and b"\r" not in data:
            # The usual read: whole events with LF line ends and nothing held back.
            events: list[tuple[int, bytes]] = []
            for event in data[:-2].split(b"\n\n"):
                payload = event[6:] if event.startswith(b"data: ") and b"\n" not in event else _data_field(event)
                if payload is not None:
                    events.append((ns, payload))
            return events
        buf = self._buf
        buf += data
        events = []
        start = 0
        while True:
            end, sep = _event_end(buf, max(start, self._scan - 3))
            if end < 0:
                break
            payload = _data_field(bytes(buf[start:end]))
            if payload is not None:
                events.append((ns, payload))
            start = end + sep
            self._scan = start
        if start:
            del buf[:start]
            self._scan = 0
        self._scan = max(self._scan, len(buf))
        if len(buf) > self.max_event:
            raise StreamError(f"an event longer than {self.max_event} bytes")
        return events


def _event_end(buf: bytearray, at: int) -> tuple[int, int]:
    """The offset of the first blank line (event terminator) at or after `at`, and its length; (-1, 0) if none."""
    at = max(at, 0)
    if buf.find(b"\r", at) < 0:  # the usual stream: LF line ends only
        return buf.find(b"\n\n", at), 2
    best, size = -1, 0
    for sep in (b"\n\n", b"\r\n\r\n", b"\r\r"):
        i = buf.find(sep, at)
        if i >= 0 and (best < 0 or i < best):
            best, size = i, len(sep)
    return best, size


def _data_field(event: bytes) -> bytes | None:
    """The event's data (its `data:` lines joined by newlines), None when it has none (a comment or keep-alive)."""
    if event.startswith(b"data: ") and b"\n" not in event and b"\r" not in event:
        return event[6:]  # the common case: one data line
    lines = [line for line in event.replace(b"\r\n", b"\n").replace(b"\r", b"\n").split(b"\n") if line.startswith(b"data:")]
    if not lines:
        return None
    return b"\n".join(line[6:] if line.startswith(b"data: ") else line[5:] for line in lines)
