"""The follower's Prometheus metrics, served on a loopback port: running point, generator rate and send lag,
CPU and RSS of the processes the agent started (model servers, generator workers), and GPUs via NVML when present."""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Iterable
from typing import Any

import psutil
from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server

from common.wire.jobs import JobTask
from common.wire.results import PointResult

log = logging.getLogger(__name__)

SAMPLE_INTERVAL_S = 1.0
IDLE = -1


def _proc_kind(proc: psutil.Process) -> str:
    """A short, bounded label for a child process: the module after `-m`, else the executable's name."""
    try:
        cmdline = proc.cmdline()
    except (psutil.Error, OSError):
        return "unknown"
    if "-m" in cmdline[:-1]:
        return cmdline[cmdline.index("-m") + 1][:64]
    return os.path.basename(cmdline[0])[:64] if cmdline else "unknown"


class FollowerMetrics:
    """Gauges and counters of one follower agent, with their own registry."""

    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.busy = Gauge("benchfleet_follower_busy", "1 while a job attempt runs.", registry=r)
        self.running_point = Gauge(
            "benchfleet_follower_running_point", "Index of the point being run (-1 when idle).", registry=r
        )
        self.points_total = Gauge("benchfleet_follower_job_points", "Points of the running job.", registry=r)
        self.points_done = Gauge("benchfleet_follower_job_points_done", "Points of the running job reported so far.", registry=r)
        self.points = Counter("benchfleet_follower_points", "Points run, by verdict.", ["valid"], registry=r)
        self.jobs = Counter("benchfleet_follower_jobs", "Job attempts ended, by outcome.", ["outcome"], registry=r)
        self.target_rate = Gauge(
            "benchfleet_follower_generator_target_rate", "Offered rate of the last point (req/s).", registry=r
        )
        self.achieved_rate = Gauge(
            "benchfleet_follower_generator_achieved_rate", "Achieved rate of the last point (req/s).", registry=r
        )
        self.send_lag = Gauge(
            "benchfleet_follower_generator_send_lag_seconds",
            "Send lag (sent - intended) of the last point, by percentile (50, 99, 100 = the maximum).",
            ["percentile"],
            registry=r,
        )
        self.latency = Gauge(
            "benchfleet_follower_point_latency_seconds",
            "Latency from the intended send time of the last point, by percentile (50, 99, 100 = the maximum).",
            ["percentile"],
            registry=r,
        )
        self.proc_cpu = Gauge(
            "benchfleet_follower_server_cpu_percent",
            "CPU use of processes the agent started (100 = one core).",
            ["proc"],
            registry=r,
        )
        self.proc_rss = Gauge(
            "benchfleet_follower_server_rss_bytes", "Resident memory of processes the agent started.", ["proc"], registry=r
        )
        self.gpu_count = Gauge("benchfleet_follower_gpus", "GPUs visible through NVML (0: none, GPU series absent).", registry=r)
        self.gpu_util = Gauge("benchfleet_follower_gpu_utilization_percent", "GPU utilisation.", ["gpu"], registry=r)
        self.gpu_mem = Gauge("benchfleet_follower_gpu_memory_used_bytes", "GPU memory in use.", ["gpu"], registry=r)
        self.gpu_power = Gauge("benchfleet_follower_gpu_power_watts", "GPU power draw.", ["gpu"], registry=r)
        self.running_point.set(IDLE)
        self._order: list[int] = []
        self._lock = threading.Lock()
        self._procs: dict[int, psutil.Process] = {}
        self._stop = threading.Event()
        self._nvml: Any = None

    # -- job lifecycle (called by follower.attempt.execute) --------------------------------------------------------------
    def job_started(self, task: JobTask) -> None:
        """A claimed attempt starts: points run backend by backend, each backend's points in index order."""
        with self._lock:
            self._order = [p.index for b in task.spec.backends for p in task.points if p.backend == b]
            self.busy.set(1)
            self.points_total.set(len(task.points))
            self.points_done.set(0)
            self.running_point.set(self._order[0] if self._order else IDLE)

    def point_done(self, result: PointResult) -> None:
        """A point finished: its generator figures, and the next point becomes the running one."""
        with self._lock:
            self.points.labels(str(result.valid).lower()).inc()
            self.points_done.inc()
            self.target_rate.set(result.offered_rate)
            self.achieved_rate.set(result.achieved_rate)
            # `percentile`, not `quantile`: that label belongs to summaries (promtool check metrics refuses it on a gauge).
            for percentile, attr in (("50", "p50"), ("99", "p99"), ("100", "max")):
                if result.send_lag_ms is not None:
                    self.send_lag.labels(percentile).set(getattr(result.send_lag_ms, attr) / 1000)
                if result.latency_ms is not None:
                    self.latency.labels(percentile).set(getattr(result.latency_ms, attr) / 1000)
            order = self._order
            after = order.index(result.point.index) + 1 if result.point.index in order else len(order)
            self.running_point.set(order[after] if after < len(order) else IDLE)

    def job_finished(self, outcome: str) -> None:
        """The attempt ended (succeeded, failed or stale)."""
        with self._lock:
            self.jobs.labels(outcome).inc()
            self.busy.set(0)
            self.running_point.set(IDLE)
            self._order = []

    # -- resource sampling -------------------------------------------------------------------------------------
    def sample(self) -> None:
        """One sample of the agent's child processes and of the GPUs."""
        try:
            children: Iterable[psutil.Process] = psutil.Process().children(recursive=True)
        except psutil.Error:
            children = []
        cpu: dict[str, float] = {}
        rss: dict[str, float] = {}
        alive: dict[int, psutil.Process] = {}
        for child in children:
            # Keep the Process objects: cpu_percent() measures since the previous call on the same object.
            proc = self._procs.get(child.pid, child)
            try:
                kind = _proc_kind(proc)
                cpu[kind] = cpu.get(kind, 0.0) + proc.cpu_percent(None)
                rss[kind] = rss.get(kind, 0.0) + proc.memory_info().rss
                alive[child.pid] = proc
            except (psutil.Error, OSError):
                continue
        self._procs = alive
        for gauge, values in ((self.proc_cpu, cpu), (self.proc_rss, rss)):
            gauge.clear()  # a stopped server's series disappears rather than freezing at its last value
            for kind, value in values.items():
                gauge.labels(kind).set(value)
        self._sample_gpus()

    def _sample_gpus(self) -> None:
        if self._nvml is None:
            try:
                import pynvml

                pynvml.nvmlInit()
                self._nvml = pynvml
            except Exception:  # no driver or no GPU: the GPU series stay absent, never faked
                self._nvml = False
        if not self._nvml:
            self.gpu_count.set(0)
            return
        nvml = self._nvml
        try:
            count = nvml.nvmlDeviceGetCount()
            self.gpu_count.set(count)
            for index in range(count):
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                label = str(index)
                self.gpu_util.labels(label).set(nvml.nvmlDeviceGetUtilizationRates(handle).gpu)
                self.gpu_mem.labels(label).set(nvml.nvmlDeviceGetMemoryInfo(handle).used)
                with contextlib.suppress(nvml.NVMLError):  # some boards do not report power
                    self.gpu_power.labels(label).set(nvml.nvmlDeviceGetPowerUsage(handle) / 1000)
        except nvml.NVMLError as exc:
            log.warning("NVML sample failed: %s", exc)

    def start(self, host: str, port: int, interval_s: float = SAMPLE_INTERVAL_S) -> int | None:
        """Serve /metrics on host:port and sample in a thread; returns the bound port, None if disabled or taken."""
        if port < 0:
            return None
        try:
            server, _thread = start_http_server(port, addr=host, registry=self.registry)
        except OSError as exc:  # the agent still benchmarks without its metrics endpoint
            log.warning("metrics endpoint %s:%d not started: %s", host, port, exc)
            return None
        bound = int(server.server_address[1])
        threading.Thread(target=self._sampler, args=(interval_s,), name="metrics-sampler", daemon=True).start()
        log.info("metrics on http://%s:%d/metrics", host, bound)
        return bound

    def _sampler(self, interval_s: float) -> None:
        while not self._stop.wait(interval_s):
            try:
                self.sample()
            except Exception as exc:  # sampling must never take the agent down
                log.warning("metrics sample failed: %s", exc)

    def stop(self) -> None:
        """Stop sampling."""
        self._stop.set()


# One per agent process; follower.attempt.execute reports to it.
METRICS = FollowerMetrics()
