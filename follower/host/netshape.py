"""Network conditions on the link between the load generator and a sandboxed server (a job's `network`).

The server's sandbox (follower/host/sandbox.py) is a network namespace joined to the follower by one veth pair; every
request and answer crosses it. Shaping puts `tc netem` (delay, jitter, loss) with `tbf` (rate) under it on *both*
ends, so each figure applies each way. The qdiscs live on the veth pair and go with the namespace when the sandbox
closes; a follower killed mid-point leaves a namespace that the next start sweeps (`sandbox.sweep_stale`), so no
namespace or qdisc outlives a run.

What a host can shape is probed once: netem needs the kernel's sch_netem, tbf sch_tbf; some kernels (minimal VM
kernels among them) have neither module. The follower advertises what it has, and placement honours it.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import socket
import statistics
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from common.spec.network import NetworkSpec
from common.wire.results import NetworkResult
from follower.host import sandbox as sandboxes

log = logging.getLogger(__name__)

RTT_PROBES = 15  # TCP handshakes timed to measure the round trip (median kept)
TBF_BURST = "32kbit"  # the token bucket's depth: a few full-size packets
TBF_LATENCY = "400ms"  # the longest a packet may wait in the bucket before it is dropped


@dataclass(frozen=True)
class Shaping:
    """The qdiscs this host can shape with ("netem", "tbf") and, when one is missing, why."""

    qdiscs: tuple[str, ...]
    note: str | None


def _tc(*args: str, netns: str | None = None) -> None:
    tc = sandboxes._need("tc")
    argv = [sandboxes._need("ip"), "netns", "exec", netns, tc, *args] if netns else [tc, *args]
    done = subprocess.run(argv, capture_output=True, timeout=10, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"tc {' '.join(args)}: {done.stderr.decode(errors='replace').strip()}")


@functools.cache
def support() -> Shaping:
    """Probed once per process: a trial sandbox's link takes each qdisc, or the reason it cannot."""
    box_ok = sandboxes.support()
    if not box_ok.ok:
        return Shaping((), f"network conditions need the server sandbox's namespace: {box_ok.reason}")
    if sandboxes._tool("tc") is None:
        return Shaping((), "tc is not installed (apt-get install iproute2)")
    trials = {"netem": ("netem", "delay", "1ms"), "tbf": ("tbf", "rate", "100mbit", "burst", TBF_BURST, "latency", TBF_LATENCY)}
    found, missing = [], []
    try:
        with tempfile.TemporaryDirectory(prefix="benchfleet-shaping-probe-") as tmp, sandboxes.Sandbox.open(Path(tmp)) as box:
            for name, qdisc in trials.items():
                try:
                    _tc("qdisc", "replace", "dev", box.outer, "root", *qdisc)
                    found.append(name)
                except RuntimeError as exc:
                    missing.append(f"{name} ({exc})")
    except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
        return Shaping((), f"a trial link could not be set up: {exc}")
    note = None if not missing else f"this kernel cannot shape with {'; '.join(missing)}"
    return Shaping(tuple(found), note)


def _qdiscs(spec: NetworkSpec) -> list[list[str]]:
    """The tc qdisc commands for one end: netem at the root (if any delay, jitter or loss), tbf under it or alone."""
    delay, jitter, loss, rate = (
        spec.effective_delay_ms(),
        spec.effective_jitter_ms(),
        spec.effective_loss_pct(),
        spec.effective_rate_mbit(),
    )
    out: list[list[str]] = []
    parent = ["root"]
    if (delay, jitter, loss) != (0, 0, 0):
        netem = ["netem", "delay", f"{delay}ms"] + ([f"{jitter}ms"] if jitter else []) + (["loss", f"{loss}%"] if loss else [])
        # netem's own queue (1000 packets by default) must never drop on its own: only `loss` may.
        out.append(["qdisc", "add", "dev", "{dev}", "root", "handle", "1:", *netem, "limit", "100000"])
        parent = ["parent", "1:1"]
    if rate is not None:
        out.append(
            [
                "qdisc",
                "add",
                "dev",
                "{dev}",
                *parent,
                "handle",
                "2:",
                "tbf",
                "rate",
                f"{rate}mbit",
                "burst",
                TBF_BURST,
                "latency",
                TBF_LATENCY,
            ]
        )
    return out


def shape(box: sandboxes.Sandbox, spec: NetworkSpec) -> None:
    """Put the conditions on both ends of the sandbox's veth pair (each figure applies each way)."""
    for command in _qdiscs(spec):
        _tc(*[box.outer if a == "{dev}" else a for a in command])
        _tc(*[box.inner if a == "{dev}" else a for a in command], netns=box.netns)
    log.info("network shaped on %s/%s: %s", box.outer, box.inner, spec.describe())


def round_trip_ms(host: str, port: int, probes: int = RTT_PROBES) -> float:
    """The median of `probes` TCP handshakes to the server (connect() returns after SYN, SYN-ACK: one round trip)."""
    times = []
    for _ in range(probes):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.settimeout(10.0)
            started = time.perf_counter_ns()
            sock.connect((host, port))
            times.append((time.perf_counter_ns() - started) / 1e6)
    return statistics.median(times)


def retransmitted_segments(netns: str | None = None) -> int:
    """TCP segments retransmitted so far in the follower's namespace (or in `netns`), from /proc/net/snmp."""
    if netns is None:
        text = Path("/proc/net/snmp").read_text()
    else:
        text = subprocess.run(
            [sandboxes._need("ip"), "netns", "exec", netns, "cat", "/proc/net/snmp"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout
    rows = [line.split() for line in text.splitlines() if line.startswith("Tcp:")]
    header, values = rows[0], rows[1]
    return int(values[header.index("RetransSegs")])


class Shaped:
    """One backend run's shaped link: the conditions, the round trip measured under them, and retransmissions per point."""

    def __init__(self, box: sandboxes.Sandbox, spec: NetworkSpec) -> None:
        self.box, self.spec = box, spec
        self.rtt_ms: float | None = None
        self._before = 0

    def measure(self, host: str, port: int) -> None:
        """The round trip under the conditions, once the server listens."""
        self.rtt_ms = round_trip_ms(host, port)

    def point_started(self) -> None:
        self._before = self._retransmits()

    def _retransmits(self) -> int:
        with contextlib.suppress(OSError, subprocess.SubprocessError, ValueError, IndexError):
            return retransmitted_segments() + retransmitted_segments(self.box.netns)
        return 0

    def result(self) -> NetworkResult:
        """What a point records: the conditions, the round trip, and the segments retransmitted during it (both ends;
        the follower's count is host-wide, so other traffic of the host adds to it)."""
        spec = self.spec
        return NetworkResult(
            profile=spec.profile,
            delay_ms=spec.effective_delay_ms(),
            jitter_ms=spec.effective_jitter_ms(),
            loss_pct=spec.effective_loss_pct(),
            rate_mbit=spec.effective_rate_mbit(),
            rtt_ms=self.rtt_ms,
            tcp_retransmits=max(0, self._retransmits() - self._before),
        )
