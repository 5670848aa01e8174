"""HTTP/1.1 response heads as the generator's raw client reads them (follower/protocols/transports/rawhttp.py): the
status, where the body starts, how it is framed (Content-Length, chunked, or the connection closing), whether the
connection closes after it, and the server's Keep-Alive timeout; 1xx interim answers are skipped."""

from __future__ import annotations


class HttpError(ConnectionError):
    """A malformed or truncated HTTP answer (counted as a transport error, like aiohttp's ClientError)."""


# status, body offset, Content-Length (-1: none), chunked, close after, the server's keep-alive timeout in ns (-1: none)
Head = tuple[int, int, int, bool, bool, int]


def parse_head(buf: bytearray) -> Head | None:
    """The response head at the start of `buf` (1xx interim answers dropped from it); None until it is complete.
    Raises HttpError for a malformed or over-long head."""
    while True:
        end = buf.find(b"\r\n\r\n")
        if end < 0:
            if len(buf) > 65536:
                raise HttpError("HTTP response head over 64 KiB")
            return None
        head = bytes(buf[:end])
        line_end = head.find(b"\r\n")
        status_line = head if line_end < 0 else head[:line_end]
        parts = status_line.split(None, 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
            raise HttpError(f"malformed HTTP status line {status_line[:80]!r}")
        status = int(parts[1])
        if 100 <= status < 200:  # interim answer (100 Continue): skip it, the real one follows
            del buf[: end + 4]
            continue
        length, chunked, close_after, keep_alive_ns = -1, False, parts[0] == b"HTTP/1.0", -1
        if line_end >= 0:
            for line in head[line_end + 2 :].split(b"\r\n"):
                name, sep, value = line.partition(b":")
                if not sep:
                    continue
                name = name.strip().lower()
                if name == b"content-length":
                    try:
                        length = int(value)
                    except ValueError:
                        raise HttpError(f"bad Content-Length {value[:40]!r}") from None
                elif name == b"transfer-encoding":
                    chunked = b"chunked" in value.lower()
                elif name == b"connection":
                    v = value.strip().lower()
                    if v == b"close":
                        close_after = True
                    elif v == b"keep-alive":
                        close_after = False
                elif name == b"keep-alive":
                    keep_alive_ns = _keep_alive_timeout_ns(value)
        if chunked:
            length = -1
        elif length < 0 and status in (204, 304):
            length = 0
        return status, end + 4, length, chunked, close_after, keep_alive_ns


def _keep_alive_timeout_ns(value: bytes) -> int:
    """The `timeout=N` of a Keep-Alive header in ns (-1: none or unreadable)."""
    for part in value.split(b","):
        key, _, number = part.strip().partition(b"=")
        if key.strip().lower() == b"timeout":
            try:
                return int(float(number.strip()) * 1e9)
            except ValueError:
                return -1
    return -1
