"""A KServe-shaped HTTP server of known capacity, for the overload tests: `--workers 1` answers one request at a time,
each taking --service-ms (so it serves 1000/service-ms req/s at most); `--workers 0` answers every request after
--service-ms however many are in flight (its capacity is the client's concurrency over the latency)."""

from __future__ import annotations

import argparse
import asyncio
import time

from aiohttp import web


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--service-ms", type=float, required=True)
    parser.add_argument("--workers", type=int, choices=(0, 1), required=True)
    args = parser.parse_args()
    service_s = args.service_ms / 1000

    busy = {"s": 0.0, "n": 0}

    async def infer(request: web.Request) -> web.Response:
        began = time.perf_counter()
        await request.read()
        if args.workers == 1:
            time.sleep(service_s)  # blocks the only event loop: requests are served one at a time, in arrival order
        else:
            await asyncio.sleep(service_s)
        busy["s"] += time.perf_counter() - began
        busy["n"] += 1
        return web.json_response({"outputs": []})

    async def stats(request: web.Request) -> web.Response:
        """The mean time a request held the worker (its service time, as this process measured it)."""
        return web.json_response({"requests": busy["n"], "service_s": busy["s"] / busy["n"] if busy["n"] else None})

    async def ready(request: web.Request) -> web.Response:
        return web.json_response({"ready": True})

    app = web.Application()
    app.router.add_post("/infer", infer)
    app.router.add_post("/v2/models/{name}/infer", infer)  # as benchfleet's kserve-http protocol sends it
    app.router.add_get("/ready", ready)
    app.router.add_get("/v2/health/ready", ready)  # as benchfleet's kserve-http protocol asks it
    app.router.add_get("/stats", stats)
    web.run_app(app, host="127.0.0.1", port=args.port, print=None, access_log=None, backlog=4096)


if __name__ == "__main__":
    main()
