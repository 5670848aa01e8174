"""The process entry every benchfleet model server shares: its options, CPU pinning, the parent watchdog, and
serving one model over HTTP (and gRPC when asked) until stopped."""

from __future__ import annotations

import argparse
import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from follower.servers.engine import KServeModel
from follower.servers.kserve_http import build_app


def add_common_args(parser: argparse.ArgumentParser) -> None:
    """The options every benchfleet model server takes."""
    parser.add_argument("--model", required=True, help="path of the model file")
    parser.add_argument("--name", required=True, help="the model name clients use in URLs")
    parser.add_argument("--version", default="1", help="the model version reported in metadata")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--grpc-port", type=int, default=None, help="also serve KServe v2 gRPC on this port (same host)")
    parser.add_argument("--instances", type=int, default=1, help="concurrent engine runs (executor workers)")
    parser.add_argument("--max-batch-size", type=int, default=0, help="dynamic batching: rows per run (0 = off)")
    parser.add_argument("--max-queue-delay-us", type=int, default=0, help="dynamic batching: longest wait to fill a batch")
    parser.add_argument("--cpus", default=None, help="comma-separated CPU ids to pin the server to (default: unpinned)")
    parser.add_argument("--parent-pid", type=int, default=None, help="exit when this process (the follower) is gone")
    parser.add_argument("--preprocess", default=None, help="server-side preprocessor (follower.servers.processing): raw input")
    parser.add_argument("--postprocess", default=None, help="server-side postprocessor (follower.servers.processing)")


def engine_options(args: argparse.Namespace) -> dict[str, Any]:
    """The KServeModel keyword options every server takes from add_common_args' options."""
    return {
        "instances": args.instances,
        "max_batch_size": args.max_batch_size,
        "max_queue_delay_us": args.max_queue_delay_us,
        "preprocess": args.preprocess,
        "postprocess": args.postprocess,
    }


def main(
    parser: argparse.ArgumentParser, argv: list[str] | None, make: Callable[[argparse.Namespace, set[int] | None], KServeModel]
) -> int:
    """A server process: parse the options, pin the CPUs (before the engine starts its threads), build the engine with
    `make(args, pinned cpus)`, serve until SIGTERM/SIGINT; exit 1 if the model failed to load."""
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    cpus = pin_cpus(args.cpus)
    return serve(make(args, cpus), args.host, args.port, args.parent_pid, args.grpc_port)


def pin_cpus(spec: str | None) -> set[int] | None:
    """Pin this process to the given CPUs (before the engine starts its threads, so they inherit it)."""
    if not spec:
        return None
    cpus = {int(c) for c in spec.split(",")}
    os.sched_setaffinity(0, cpus)
    return cpus


def watch_parent(parent_pid: int, on_gone: Any) -> None:
    """Stop the server when the follower that started it dies (even by SIGKILL): no orphan servers."""

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(0.5)
        on_gone()

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def serve(server: KServeModel, host: str, port: int, parent_pid: int | None, grpc_port: int | None = None) -> int:
    """Serve until SIGTERM/SIGINT (or the parent's death); exit code 1 if the model failed to load."""
    import uvicorn  # imported here so that importing the module (tests, metadata) stays light

    def stop() -> None:
        # Called from the loading or watchdog thread: uvicorn polls should_exit and shuts down cleanly.
        uv_server.should_exit = True

    companions = []
    if grpc_port:
        from follower.servers.kserve_grpc import grpc_door  # grpc loads only where it is asked for

        companions.append(grpc_door(server, host, grpc_port))
    config = uvicorn.Config(
        build_app(server, on_load_failure=stop, companions=companions),
        host=host,
        port=port,
        loop="uvloop",
        http="httptools",
        access_log=False,
        workers=1,
        log_level="warning",
        lifespan="on",
        # Clients keep connections between warm-up and measured runs; don't drop them as idle in between.
        timeout_keep_alive=60,
    )
    uv_server = uvicorn.Server(config)
    if parent_pid is not None:
        watch_parent(parent_pid, stop)
    uv_server.run()
    return 1 if server.load_error is not None else 0
