"""A lean thread pool for engine calls, resolving futures on the server's event loop."""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
from collections.abc import Callable
from typing import Any


class EnginePool:
    """`workers` threads running engine calls for one event loop: a lean `run_in_executor`.

    ThreadPoolExecutor + wrap_future take a lock, build a concurrent Future, chain it to an asyncio one and hop
    back through two callbacks; here a call is one SimpleQueue put and one call_soon_threadsafe back, which halves
    the handoff on a small model. A call still waits in the queue for a free worker: that wait is the queue stage.
    """

    def __init__(self, workers: int, name: str) -> None:
        self.workers = workers
        self.name = name
        self._queue: queue.SimpleQueue[tuple[Any, ...] | None] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._closed = False

    def run(self, loop: asyncio.AbstractEventLoop, fn: Callable[..., Any], *args: Any) -> asyncio.Future[Any]:
        """Run fn(*args) on a worker; the returned future resolves on `loop`."""
        if self._closed:
            raise RuntimeError("engine pool is shut down")
        if len(self._threads) < self.workers:
            self._start_workers()  # lazily, as ThreadPoolExecutor does: threads inherit the CPU pinning done by then
        future: asyncio.Future[Any] = loop.create_future()
        self._queue.put((loop, future, fn, args))
        return future

    def _start_workers(self) -> None:
        with self._lock:
            while len(self._threads) < self.workers:
                thread = threading.Thread(target=self._work, name=f"{self.name}_{len(self._threads)}", daemon=True)
                thread.start()
                self._threads.append(thread)

    @staticmethod
    def _settle(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
        if future.done():  # the awaiting request was cancelled (client gone)
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)

    def _work(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            loop, future, fn, args = item
            if future.done():
                continue
            try:
                result, error = fn(*args), None
            except BaseException as exc:  # noqa: BLE001 - handed to the awaiting request
                result, error = None, exc
            with contextlib.suppress(RuntimeError):  # a closed loop: nobody is waiting any more
                loop.call_soon_threadsafe(self._settle, future, result, error)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Stop the workers once they finish their current call (queued calls are dropped with cancel_futures)."""
        self._closed = True
        if cancel_futures:
            while True:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is not None:
                    with contextlib.suppress(RuntimeError):  # a closed loop: nobody is waiting any more
                        item[0].call_soon_threadsafe(item[1].cancel)
        for _ in self._threads:
            self._queue.put(None)
        if wait:
            for thread in self._threads:
                thread.join()
