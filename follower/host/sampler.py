"""The resource sampler: CPU and RSS of the serving process tree and the GPUs (NVML), on the generator's clock.

A thread samples every `interval_s` (default 12.5 Hz, above the 10 Hz floor of MEASUREMENT.md) with
time.monotonic_ns(), the clock the load generator stamps requests with, so a summary can be cut to exactly the
measured part of a point. What cannot be measured here stays None (absent), never 0: no GPU → no GPU fields, no
readable RAPL counter → no CPU energy.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import psutil

from common.wire.results import Resources

log = logging.getLogger(__name__)

DEFAULT_INTERVAL_S = 0.08
# How often the process tree is walked again for new children (a walk reads all of /proc; samples are cheaper).
CHILDREN_REFRESH_S = 1.0
# Linux powercap (Intel RAPL, also AMD on recent kernels): package energy counters in microjoules.
POWERCAP_ROOT = Path("/sys/class/powercap")
J_PER_KWH = 3.6e6


@dataclass(frozen=True)
class SamplerConfig:
    """How often to sample and the prices that turn usage into CO2 and cost (None: not configured → not reported)."""

    interval_s: float = DEFAULT_INTERVAL_S
    grid_g_co2_per_kwh: float | None = None
    instance_price_per_hour: float | None = None
    gpu_indices: tuple[int, ...] | None = None  # None: every GPU NVML sees


@dataclass
class Samples:
    """Sampled series as arrays; GPU columns are absent (None) when no GPU could be read."""

    t_ns: np.ndarray
    cpu_percent: np.ndarray | None  # 100 = one core, summed over the process tree, over the interval ending at t
    rss_bytes: np.ndarray | None  # None (both) when there was no server process to sample
    gpu_util_percent: np.ndarray | None = None  # mean over the sampled GPUs
    gpu_memory_bytes: np.ndarray | None = None  # sum over the sampled GPUs
    gpu_power_w: np.ndarray | None = None  # sum over the sampled GPUs
    cpu_energy_j: np.ndarray | None = None  # cumulative CPU package energy since start (RAPL), where readable
    start_ns: int = 0  # when start() read the tree's CPU time: where the first sample's interval begins


class _Nvml:
    """The NVML handles of the GPUs to sample; `available` is False where there is no driver or no GPU."""

    def __init__(self, indices: tuple[int, ...] | None) -> None:
        self.available = False
        self.handles: list[Any] = []
        self.power_ok = True
        try:
            import pynvml

            pynvml.nvmlInit()
            count = pynvml.nvmlDeviceGetCount()
            wanted = range(count) if indices is None else [i for i in indices if 0 <= i < count]
            self.handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in wanted]
            self.nvml = pynvml
            self.available = bool(self.handles)
        except Exception as exc:  # no libnvidia-ml, no driver, no device: the GPU fields stay absent
            log.debug("NVML not available: %s", exc)

    def sample(self) -> tuple[float, float, float | None]:
        """(mean utilisation %, summed memory bytes, summed power W or None when a board reports none)."""
        nvml = self.nvml
        util = mem = 0.0
        power: float | None = 0.0 if self.power_ok else None
        for handle in self.handles:
            util += nvml.nvmlDeviceGetUtilizationRates(handle).gpu
            mem += nvml.nvmlDeviceGetMemoryInfo(handle).used
            if power is not None:
                try:
                    power += nvml.nvmlDeviceGetPowerUsage(handle) / 1000.0  # mW → W
                except nvml.NVMLError:
                    self.power_ok = False  # some boards do not report power: absent from now on
                    power = None
        return util / len(self.handles), mem, power

    def close(self) -> None:
        if self.available:
            with contextlib.suppress(Exception):
                self.nvml.nvmlShutdown()


def read_rapl_uj() -> tuple[int, int] | None:
    """Summed package energy (µJ) and wrap range of the readable RAPL package counters; None where none is readable."""
    if not POWERCAP_ROOT.is_dir():
        return None
    total = span = 0
    found = False
    for zone in sorted(POWERCAP_ROOT.glob("*-rapl:[0-9]*")):
        if zone.name.count(":") != 1:
            continue  # sub-zones (core, uncore, dram) are inside the package counter already
        try:
            total += int((zone / "energy_uj").read_text())
            span += int((zone / "max_energy_range_uj").read_text())
            found = True
        except (OSError, ValueError):
            return None  # unreadable (often root-only): no partial figure
    return (total, span) if found else None


class ResourceSampler:
    """Samples the process tree rooted at `pid` and the GPUs in a thread between start() and stop()."""

    def __init__(self, pid: int | None, config: SamplerConfig | None = None) -> None:
        self.pid = pid
        self.config = config or SamplerConfig()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._t: list[int] = []
        self._cpu: list[float] = []
        self._rss: list[float] = []
        self._gpu: list[tuple[float, float, float | None]] = []
        self._procs: dict[int, psutil.Process] = {}
        self._cpu_prev: dict[int, float] = {}
        self._nvml: _Nvml | None = None
        self._rapl: list[float] = []  # cumulative joules per sample (wraps undone)
        self._rapl_last: tuple[int, int] | None = None
        self._rapl_ok = True
        self._start_ns = 0
        self.errors = 0

    def start(self) -> ResourceSampler:
        """Take a first sample now and keep sampling in a daemon thread."""
        self._nvml = _Nvml(self.config.gpu_indices)
        self._refresh_tree()
        self._start_ns = self._prev_t = time.monotonic_ns()
        for proc in self._procs.values():
            self._cpu_prev[proc.pid] = self._cpu_s(proc)
        self._rapl_ok = read_rapl_uj() is not None
        self._rapl_total = 0.0
        self._rapl_last = read_rapl_uj()
        self._thread = threading.Thread(target=self._loop, name="resource-sampler", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> Samples:
        """Stop sampling and return the series."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5.0)
        if self._nvml is not None:
            self._nvml.close()
        return self.samples()

    def __enter__(self) -> ResourceSampler:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def samples(self) -> Samples:
        """The series so far."""
        out = Samples(
            t_ns=np.asarray(self._t, dtype=np.int64),
            cpu_percent=np.asarray(self._cpu, dtype=np.float64) if self.pid is not None else None,
            rss_bytes=np.asarray(self._rss, dtype=np.float64) if self.pid is not None else None,
            start_ns=self._start_ns,
        )
        if self._gpu:
            out.gpu_util_percent = np.asarray([g[0] for g in self._gpu])
            out.gpu_memory_bytes = np.asarray([g[1] for g in self._gpu])
            if all(g[2] is not None for g in self._gpu):
                out.gpu_power_w = np.asarray([g[2] for g in self._gpu], dtype=np.float64)
        if self._rapl_ok and len(self._rapl) == len(self._t):
            out.cpu_energy_j = np.asarray(self._rapl, dtype=np.float64)
        return out

    # -- sampling -------------------------------------------------------------------------------------------------
    def _loop(self) -> None:
        interval_ns = int(self.config.interval_s * 1e9)
        next_ns = self._prev_t + interval_ns
        last_walk = time.monotonic()
        while not self._stop.wait(max(0, next_ns - time.monotonic_ns()) / 1e9):
            next_ns += interval_ns
            if time.monotonic() - last_walk >= CHILDREN_REFRESH_S:
                self._refresh_tree()
                last_walk = time.monotonic()
            try:
                self._sample()
            except Exception as exc:  # a sampler failure must never touch the measurement
                self.errors += 1
                if self.errors == 1:
                    log.warning("resource sample failed: %s", exc)

    def _refresh_tree(self) -> None:
        if self.pid is None:
            return
        try:
            root = self._procs.get(self.pid) or psutil.Process(self.pid)
            tree = [root, *root.children(recursive=True)]
        except psutil.Error:
            return
        # Keep the Process objects already known (psutil checks pid reuse through them).
        self._procs = {p.pid: self._procs.get(p.pid, p) for p in tree}

    @staticmethod
    def _cpu_s(proc: psutil.Process) -> float:
        times = proc.cpu_times()
        return float(times.user + times.system)

    def _sample(self) -> None:
        now = time.monotonic_ns()
        dt_s = (now - self._prev_t) / 1e9
        cpu_s = rss = 0.0
        gone: list[int] = []
        for pid, proc in self._procs.items():
            try:
                with proc.oneshot():
                    used = self._cpu_s(proc)
                    rss += proc.memory_info().rss
            except psutil.Error:
                gone.append(pid)
                continue
            # A child first seen now contributes from its next sample (its earlier CPU time is not in this interval).
            cpu_s += used - self._cpu_prev.get(pid, used)
            self._cpu_prev[pid] = used
        for pid in gone:
            self._procs.pop(pid, None)
        gpu = self._nvml.sample() if self._nvml is not None and self._nvml.available else None
        self._prev_t = now
        if self.pid is not None and not self._procs:
            return  # the server is gone: no sample rather than a zero
        self._t.append(now)
        if self._rapl_ok:
            self._rapl.append(self._rapl_joules())
        self._cpu.append(100.0 * cpu_s / dt_s if dt_s > 0 else 0.0)
        self._rss.append(rss)
        if gpu is not None:
            self._gpu.append(gpu)

    def _rapl_joules(self) -> float:
        """CPU package energy since start(), in joules, undoing counter wraps."""
        reading = read_rapl_uj()
        if reading is None or self._rapl_last is None:
            self._rapl_ok = False
            return 0.0
        delta = reading[0] - self._rapl_last[0]
        if delta < 0:  # the counter wrapped
            delta += reading[1]
        self._rapl_last = reading
        self._rapl_total += delta / 1e6
        return self._rapl_total


@dataclass
class Window:
    """The measured part of a run (monotonic ns) and the requests it answered."""

    start_ns: int
    end_ns: int
    requests: int
    output_tokens: int = 0  # a language model's output tokens over it (the server's count)


def _integrate_w(t_ns: np.ndarray, watts: np.ndarray, start_ns: int, end_ns: int) -> float | None:
    """Energy (J) of a sampled power series over [start_ns, end_ns]: trapezoids, held flat to the window's edges."""
    if len(t_ns) == 0:
        return None
    grid = np.concatenate([[start_ns], t_ns[(t_ns > start_ns) & (t_ns < end_ns)], [end_ns]])
    power = np.interp(grid, t_ns, watts)
    return float(np.trapezoid(power, grid / 1e9))


def summarize(samples: Samples, window: Window, config: SamplerConfig) -> Resources:
    """Mean/max over the samples inside the window, energy per request (and per 1k output tokens), CO2, and cost per
    1M requests (and per 1M output tokens) at the follower's instance price."""
    t = samples.t_ns
    inside = (t >= window.start_ns) & (t <= window.end_ns)
    n = int(inside.sum())
    duration_s = max(window.end_ns - window.start_ns, 0) / 1e9
    res = Resources(samples=n, interval_ms=config.interval_s * 1e3)
    if n:
        if n > 1:
            res.interval_ms = float(np.diff(t[inside]).mean()) / 1e6
        if samples.cpu_percent is not None and samples.rss_bytes is not None:
            cpu, rss = samples.cpu_percent[inside], samples.rss_bytes[inside]
            res.server_cpu_percent_mean = float(cpu.mean())
            res.server_cpu_percent_max = float(cpu.max())
            res.server_rss_mb_mean = float(rss.mean()) / 2**20
            res.server_rss_mb_max = float(rss.max()) / 2**20
        if samples.gpu_util_percent is not None and samples.gpu_memory_bytes is not None:
            res.gpu_util_percent_mean = float(samples.gpu_util_percent[inside].mean())
            res.gpu_memory_mb_max = float(samples.gpu_memory_bytes[inside].max()) / 2**20
        if samples.gpu_power_w is not None:
            res.gpu_power_w_mean = float(samples.gpu_power_w[inside].mean())
            res.energy_j = _integrate_w(t, samples.gpu_power_w, window.start_ns, window.end_ns)
    if samples.cpu_energy_j is not None and len(t):
        edges = np.interp([window.start_ns, window.end_ns], t, samples.cpu_energy_j)
        res.cpu_energy_j = float(edges[1] - edges[0])
    # Energy counts what was measured: GPU and/or CPU package; with neither there is no energy figure at all.
    parts = [e for e in (res.energy_j, res.cpu_energy_j) if e is not None]
    if parts and window.output_tokens > 0:
        res.energy_per_1k_output_tokens_j = sum(parts) / window.output_tokens * 1e3
    if parts and window.requests > 0:
        res.energy_per_request_j = sum(parts) / window.requests
        if config.grid_g_co2_per_kwh is not None:
            res.co2_g_per_1m_requests = res.energy_per_request_j * 1e6 / J_PER_KWH * config.grid_g_co2_per_kwh
    if config.instance_price_per_hour is not None and window.requests > 0 and duration_s > 0:
        # The host is paid for by the hour whatever it serves: the run's share of the price over its answers.
        res.cost_per_1m_requests = config.instance_price_per_hour * duration_s / 3600.0 / window.requests * 1e6
        if window.output_tokens > 0:
            res.cost_per_1m_output_tokens = config.instance_price_per_hour * duration_s / 3600.0 / window.output_tokens * 1e6
    return res
