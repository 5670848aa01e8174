"""A gateway in front of a KServe v2 endpoint that wants an API key, as a team's ingress would: a request without the
right header gets 401, one with it is forwarded. GET /counts says how many of each it saw.

    python -m tests.e2e.auth_proxy --port P --upstream http://127.0.0.1:Q --header X-Api-Key --key-file FILE
"""

from __future__ import annotations

import argparse
from pathlib import Path

import aiohttp
from aiohttp import web


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--upstream", required=True)
    parser.add_argument("--header", required=True)
    parser.add_argument("--key-file", type=Path, required=True)  # not argv: a key in argv shows in `ps`
    args = parser.parse_args()
    key = args.key_file.read_text().strip()
    counts = {"authorized": 0, "refused": 0}

    async def forward(request: web.Request) -> web.Response:
        if request.path == "/counts":
            return web.json_response(counts)
        if request.headers.get(args.header) != key:
            counts["refused"] += 1
            return web.json_response({"error": "missing or wrong API key"}, status=401)
        counts["authorized"] += 1
        session: aiohttp.ClientSession = request.app["session"]
        body = await request.read()
        async with session.request(request.method, args.upstream + request.path_qs, data=body,
                                   headers={"Content-Type": request.headers.get("Content-Type", "application/json")}) as up:
            return web.Response(status=up.status, body=await up.read(), content_type="application/json")

    async def session_ctx(app: web.Application):  # type: ignore[no-untyped-def]
        app["session"] = aiohttp.ClientSession()
        yield
        await app["session"].close()

    app = web.Application()
    app.cleanup_ctx.append(session_ctx)
    app.router.add_route("*", "/{tail:.*}", forward)
    web.run_app(app, host="127.0.0.1", port=args.port, print=None)


if __name__ == "__main__":
    main()
