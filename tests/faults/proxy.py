"""A loopback TCP proxy that can cut the link: the transport seam for "a follower cut off from the leader"."""

from __future__ import annotations

import asyncio
import contextlib
import re
import threading

from common.procs import free_port

CHUNK = 64 * 1024
REQUEST_LINE = re.compile(rb"(GET|POST|PUT|DELETE|PATCH) (\S+) HTTP/1\.[01]\r\n")


class CuttableProxy:
    """Forwards 127.0.0.1:port to a target port; cut() drops every connection and refuses new ones until restore()."""

    def __init__(self, target_port: int, port: int | None = None) -> None:
        self.target_port = target_port
        self.port = port or free_port()
        self.connections = 0  # accepted while the link was up (a test can see traffic really went through)
        self.requests: list[str] = []  # "METHOD path" of every request that crossed the link, in order
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="cuttable-proxy", daemon=True)
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> CuttableProxy:
        """Start the loop thread and listen."""
        self._thread.start()
        self.restore()
        return self

    def _call(self, coro) -> None:  # type: ignore[no-untyped-def]
        asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout=10)

    def cut(self) -> None:
        """Stop listening (connection refused) and abort every open connection, as a dead link would."""
        self._call(self._cut())

    def restore(self) -> None:
        """Listen again on the same port."""
        self._call(self._listen())

    def stop(self) -> None:
        """Cut, then stop the loop thread."""
        with contextlib.suppress(Exception):
            self.cut()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)

    async def _listen(self) -> None:
        if self._server is None:
            self._server = await asyncio.start_server(self._handle, "127.0.0.1", self.port, reuse_address=True)

    async def _cut(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        for writer in list(self._writers):
            writer.transport.abort()
        self._writers.clear()

    async def _handle(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            upstream_r, upstream_w = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            client_w.transport.abort()
            return
        self._writers.update((client_w, upstream_w))

        async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, upward: bool) -> None:
            try:
                while data := await reader.read(CHUNK):
                    if upward:
                        # A request line starts a write; bodies are JSON or binary and never look like one.
                        self.requests += [f"{m.group(1).decode()} {m.group(2).decode()}" for m in REQUEST_LINE.finditer(data)]
                    writer.write(data)
                    await writer.drain()
            except (OSError, asyncio.IncompleteReadError):
                pass
            finally:
                with contextlib.suppress(Exception):
                    writer.close()

        try:
            await asyncio.gather(pipe(client_r, upstream_w, True), pipe(upstream_r, client_w, False))
        finally:
            self._writers.difference_update((client_w, upstream_w))
