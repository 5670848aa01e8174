"""An LLM server's own gauges through a point: its running batch, its queue and its KV cache in use, read from its
metrics once per measurement window (one /metrics request a window, as a scrape at that period would cost), and each
window's mean of the reads inside it (follower/loadgen/windows.py makes the rest of a window's figures)."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from common.wire.results import WindowStat
from follower.backends.stats import llm_gauges

MIN_INTERVAL_S = 0.25

Reading = tuple[int, dict[str, float]]  # (monotonic ns at the read's middle, the gauges it gave)


class GaugeSampler:
    """Reads `stats()` (a backend's metrics snapshot) every `interval_s` on a thread, until stopped."""

    def __init__(self, stats: Callable[[], dict[str, Any]], interval_s: float) -> None:
        self.stats = stats
        self.interval_s = max(interval_s, MIN_INTERVAL_S)
        self.readings: list[Reading] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="llm-gauges", daemon=True)

    def start(self) -> GaugeSampler:
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            before = time.monotonic_ns()
            with contextlib.suppress(Exception):  # a server that does not answer leaves a hole, never ends the point
                gauges = llm_gauges(self.stats())
                if gauges:
                    self.readings.append(((before + time.monotonic_ns()) // 2, gauges))
            self._stop.wait(self.interval_s)

    def stop(self) -> list[Reading]:
        self._stop.set()
        self._thread.join(timeout=5.0)
        return list(self.readings)


def with_gauges(windows: list[WindowStat], readings: list[Reading] | None, origin_ns: int) -> list[WindowStat]:
    """The windows (aligned on `origin_ns`) with the mean of each gauge read inside each of them; unchanged without."""
    if not readings:
        return windows
    t = np.array([r[0] for r in readings], dtype=np.int64)
    out = []
    for w in windows:
        a = origin_ns + int(round(w.t_s * 1e9))
        inside = [g for (ti, g) in zip(t, (r[1] for r in readings), strict=True) if a <= ti < a + int(round(w.duration_s * 1e9))]
        means = {
            field: float(np.mean(values))
            for field in ("running", "waiting", "kv_cache_usage")
            if (values := [g[field] for g in inside if field in g])
        }
        update = {"server_running": means.get("running"), "server_waiting": means.get("waiting")}
        update["kv_cache_usage"] = means.get("kv_cache_usage")
        out.append(w.model_copy(update=update))
    return out
