"""A fast KServe v2 HTTP endpoint for bench/shards.py: one asyncio protocol on uvloop answers every POST at once with
a fixed answer (no model), so what limits a point is the load generator, not the server. It serves
GET /v2/health/ready and GET /v2/models/<name> (one FP32 input of shape [-1, 4]) so a job can target it as any
KServe endpoint.

    python bench/fast_endpoint.py --port P [--name fast]
"""

from __future__ import annotations

import argparse
import asyncio
import json


def response(status: str, body: bytes) -> bytes:
    return (f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode() + body


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--name", default="fast")
    args = parser.parse_args()
    answer = response(
        "200 OK",
        json.dumps(
            {"model_name": args.name, "outputs": [{"name": "output", "datatype": "FP32", "shape": [1, 1], "data": [0.0]}]}
        ).encode(),
    )
    meta = response(
        "200 OK",
        json.dumps(
            {
                "name": args.name,
                "versions": ["1"],
                "platform": "bench",
                "inputs": [{"name": "input", "datatype": "FP32", "shape": [-1, 4]}],
                "outputs": [],
            }
        ).encode(),
    )
    ready = response("200 OK", b'{"ready": true}')
    missing = response("404 Not Found", b'{"error": "not found"}')

    class Http(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            self.transport = transport
            self.buf = b""

        def data_received(self, data: bytes) -> None:
            self.buf += data
            while True:
                head_end = self.buf.find(b"\r\n\r\n")
                if head_end < 0:
                    return
                head = self.buf[:head_end].decode("latin-1")
                length = 0
                for line in head.split("\r\n")[1:]:
                    name, _, value = line.partition(":")
                    if name.strip().lower() == "content-length":
                        length = int(value.strip())
                end = head_end + 4 + length
                if len(self.buf) < end:
                    return
                method, path = head.split(" ", 2)[:2]
                self.buf = self.buf[end:]
                if method == "POST":
                    out = answer
                elif path == "/v2/health/ready":
                    out = ready
                elif path == f"/v2/models/{args.name}":
                    out = meta
                else:
                    out = missing
                self.transport.write(out)  # type: ignore[attr-defined]

    async def serve() -> None:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(Http, "127.0.0.1", args.port, backlog=4096)
        async with server:
            await server.serve_forever()

    import uvloop

    uvloop.run(serve())


if __name__ == "__main__":
    main()
