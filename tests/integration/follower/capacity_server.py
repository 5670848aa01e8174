"""A KServe-shaped HTTP server of known capacity, for the overload tests: `--workers 1` answers one request at a time,
each taking --service-ms (so it serves 1000/service-ms req/s at most); `--workers 0` answers every request after
--service-ms however many are in flight (its capacity is the client's concurrency over the latency). `--virtual` with
`--workers 1`: a FIFO queue in virtual time, each request finishing at max(its arrival, the previous finish) +
service, awaited without holding the loop: its capacity is exactly 1000/service-ms whatever the host's CPU does (a
stall can make an answer late, never early), and the backlog a client leaves behind is worked off as a real one is."""

from __future__ import annotations

import argparse
import asyncio
import threading
import time

from aiohttp import web


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--service-ms", type=float, required=True)
    parser.add_argument("--workers", type=int, choices=(0, 1), required=True)
    parser.add_argument("--watch-stalls", action="store_true", help="note the host's stalls (stats: stalls_ms)")
    parser.add_argument("--virtual", action="store_true", help="with --workers 1: FIFO service in virtual time")
    args = parser.parse_args()
    service_s = args.service_ms / 1000

    busy = {"s": 0.0, "n": 0, "cpu_in": 0.0, "cpu0": -1.0}
    queue = {"free_at": 0.0}  # --virtual: when the worker finishes the last request queued (the loop's clock)
    traceparents: set[str] = set()  # the W3C trace contexts requests carried (a job's propagate_trace)

    stalls: list[float] = []  # host stalls this process saw (ms): a watcher thread woke this much late

    def watch() -> None:
        """Wake every 5 ms and note each wake-up 20 ms or more late: the host gave this process no core for that long
        (the event loop holds the GIL only briefly: its one long wait, the service time, sleeps without it)."""
        tick, last = 0.005, time.perf_counter()
        while True:
            time.sleep(tick)
            now = time.perf_counter()
            if (late := now - last - tick) >= 0.02 and len(stalls) < 10_000:
                stalls.append(round(late * 1000, 1))
            last = now

    if args.watch_stalls:
        threading.Thread(target=watch, name="stall-watcher", daemon=True).start()

    async def infer(request: web.Request) -> web.Response:
        began, cpu = time.perf_counter(), time.process_time()
        if (header := request.headers.get("traceparent")) is not None and len(traceparents) < 1000:
            traceparents.add(header[:64])
        if busy["cpu0"] < 0:
            busy["cpu0"] = cpu
        await request.read()
        if args.virtual:
            # Queued behind every earlier arrival, whether or not its client still waits (a disconnect does not
            # shorten the queue: the server would still work it off).
            now = asyncio.get_running_loop().time()
            queue["free_at"] = finish = max(now, queue["free_at"]) + service_s
            await asyncio.sleep(finish - now)
        elif args.workers == 1:
            time.sleep(service_s)  # blocks the only event loop: requests are served one at a time, in arrival order
        else:
            await asyncio.sleep(service_s)
        busy["s"] += time.perf_counter() - began
        busy["cpu_in"] += time.process_time() - cpu
        busy["n"] += 1
        return web.json_response({"outputs": []})

    async def stats(request: web.Request) -> web.Response:
        """The mean time a request held the worker (its service time, as this process measured it): the handler's own
        time, plus the CPU the event loop spent on it outside the handler (parsing, answering), shared over the
        requests. Waiting for a core on a busy host is not in it."""
        n = busy["n"]
        if not n:
            return web.json_response({"requests": 0, "service_s": None, "traceparents": []})
        outside = max(0.0, time.process_time() - busy["cpu0"] - busy["cpu_in"])
        measured_s = service_s if args.virtual else (busy["s"] + outside) / n  # virtual: exactly as configured
        return web.json_response(
            {
                "requests": n,
                "service_s": measured_s,
                "handler_s": service_s if args.virtual else busy["s"] / n,
                "virtual": args.virtual,
                "traceparents": sorted(traceparents),
                "stalls_ms": stalls,
            }
        )

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
