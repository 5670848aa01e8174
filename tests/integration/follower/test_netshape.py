"""Network conditions on the sandbox's veth pair (follower/host/netshape.py), with real tc qdiscs and real servers.

What this host's kernel can shape is probed: a test that needs a qdisc it lacks (minimal VM kernels have no
sch_netem) skips with the probe's reason.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from common.spec.job import PointSpec
from common.spec.network import NetworkSpec
from common.spec.slo import SLO
from common.wire.models import ModelMeta
from common.wire.results import PointResult
from follower.host import netshape
from follower.host import sandbox as sandboxes
from follower.point.context import ServerRun
from follower.point.runner import run_backend
from tests.conftest import wait_for_port
from tests.integration.follower.test_runner import HOST, point

pytestmark = pytest.mark.integration

SHAPING = netshape.support()
BODY_BYTES = 400_000


def need(qdisc: str) -> None:
    if qdisc not in SHAPING.qdiscs:
        pytest.skip(f"this host cannot shape with {qdisc}: {SHAPING.note}")


def links() -> str:
    return subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True, check=True).stdout


def serve(box: sandboxes.Sandbox, port: int) -> subprocess.Popen[bytes]:
    """A plain HTTP server in the sandbox's namespace answering BODY_BYTES to any GET."""
    code = textwrap.dedent(f"""
        import http.server
        class H(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                self.send_response(200); self.send_header("Content-Length", "{BODY_BYTES}"); self.end_headers()
                self.wfile.write(b"x" * {BODY_BYTES})
            def log_message(self, *a): pass
        http.server.HTTPServer(("{box.host}", {port}), H).serve_forever()
    """)
    return subprocess.Popen(["ip", "netns", "exec", box.netns, sys.executable, "-c", code])


def download_s(host: str, port: int) -> float:
    import urllib.request

    started = time.monotonic()
    with urllib.request.urlopen(f"http://{host}:{port}/", timeout=30) as answer:
        assert len(answer.read()) == BODY_BYTES
    return time.monotonic() - started


def test_a_rate_limit_holds_each_way_and_leaves_nothing_behind(tmp_path: Path) -> None:
    """tbf at 4 Mbit/s: 400 kB cannot arrive in under 0.8 s (it takes 0.1 ms unshaped); closing the sandbox removes the
    namespace, the veth pair and the qdiscs on it."""
    need("tbf")
    with sandboxes.Sandbox.open(tmp_path) as box:
        server = serve(box, 8123)
        try:
            wait_for_port(8123, host=box.host)
            plain = download_s(box.host, 8123)
            netshape.shape(box, NetworkSpec(rate_mbit=4))
            qdiscs = subprocess.run(["tc", "qdisc", "show", "dev", box.outer], capture_output=True, text=True).stdout
            assert "tbf" in qdiscs and "rate 4Mbit" in qdiscs, qdiscs
            shaped = download_s(box.host, 8123)
        finally:
            server.kill()
            server.wait()
        outer, netns = box.outer, box.netns
    assert shaped >= BODY_BYTES * 8 / 4e6 * 0.9 > plain, (plain, shaped)
    assert not Path(f"/run/netns/{netns}").exists() and f" {outer}@" not in links()


def test_a_killed_followers_shaped_link_is_swept_at_the_next_start(tmp_path: Path) -> None:
    """A follower SIGKILLed with a shaped link open leaves its namespace; the next start's sweep removes it, and the
    veth pair and its qdiscs go with it."""
    need("tbf")
    code = textwrap.dedent(f"""
        import sys, time
        from pathlib import Path
        from common.spec.network import NetworkSpec
        from follower.host import netshape, sandbox
        box = sandbox.Sandbox.open(Path({str(tmp_path)!r}))
        netshape.shape(box, NetworkSpec(rate_mbit=10))
        print(box.netns, box.outer, flush=True)
        time.sleep(600)
    """)
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, cwd=Path(__file__).parents[3])
    assert child.stdout is not None
    netns, outer = child.stdout.readline().split()
    assert Path(f"/run/netns/{netns}").exists() and f" {outer}@" in links()
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    assert Path(f"/run/netns/{netns}").exists()  # nothing ran to remove it
    sandboxes.sweep_stale()  # what the next follower start does (its sandbox probe)
    assert not Path(f"/run/netns/{netns}").exists() and f" {outer}@" not in links()


def test_a_delay_adds_its_round_trip(tmp_path: Path) -> None:
    """netem 50 ms each way: the handshake's round trip grows by 100 ms (within 10%)."""
    need("netem")
    with sandboxes.Sandbox.open(tmp_path) as box:
        server = serve(box, 8124)
        try:
            wait_for_port(8124, host=box.host)
            plain = netshape.round_trip_ms(box.host, 8124)
            netshape.shape(box, NetworkSpec(delay_ms=50))
            shaped = netshape.round_trip_ms(box.host, 8124)
        finally:
            server.kill()
            server.wait()
    assert abs((shaped - plain) - 100) <= 10, (plain, shaped)


async def _points(spec: NetworkSpec | None, model: ModelMeta, path: Path, workdir: Path) -> list[PointResult]:
    points: list[PointSpec] = [point(rate=20.0, duration_s=4.0, warmup_s=1.0)]
    return [
        r
        async for r in run_backend(
            "onnxruntime",
            points,
            ServerRun(model=model, model_path=path, workdir=workdir, host_facts=HOST, slo=SLO(p99_ms=10_000.0), network=spec),
        )
    ]


def test_a_point_under_a_4g_like_delay_is_slower_by_its_round_trip(mlp_meta: ModelMeta, mlp_path: Path, tmp_path: Path) -> None:
    """50 ms each way: the point's p50 from the intended time rises by the measured round trip (within 10%), the
    result records the conditions and the round trip, and the transmission stage grows with it."""
    need("netem")
    (plain,) = asyncio.run(_points(None, mlp_meta, mlp_path, tmp_path / "plain"))
    (slow,) = asyncio.run(_points(NetworkSpec(delay_ms=50), mlp_meta, mlp_path, tmp_path / "slow"))
    assert plain.latency_ms is not None and slow.latency_ms is not None and slow.network is not None
    assert slow.network.delay_ms == 50 and slow.network.rtt_ms is not None and abs(slow.network.rtt_ms - 100) <= 10
    rise = slow.latency_ms.p50 - plain.latency_ms.p50
    assert abs(rise - slow.network.rtt_ms) <= 0.1 * slow.network.rtt_ms, (plain.latency_ms.p50, slow.latency_ms.p50)
    assert (slow.stages_ms or {}).get("transmission", 0) > (plain.stages_ms or {}).get("transmission", 0) + 50


def test_loss_shows_as_retransmissions(mlp_meta: ModelMeta, mlp_path: Path, tmp_path: Path) -> None:
    """10% loss each way: TCP retransmits, and the point counts the retransmitted segments (and any errors)."""
    need("netem")
    (lossy,) = asyncio.run(_points(NetworkSpec(loss_pct=10), mlp_meta, mlp_path, tmp_path))
    assert lossy.network is not None and lossy.network.loss_pct == 10
    assert lossy.network.tcp_retransmits > 0 and lossy.requests > 0


def test_a_point_over_a_shaped_link_records_the_conditions_and_leaves_no_link(
    mlp_meta: ModelMeta, mlp_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The runner shapes the server's link once it is ready, measures the round trip under it, records the conditions
    in every point, and the link is gone when the server stops (here with a rate: what this kernel can shape). The
    sandboxes this run opened are the ones checked: another test's, opened meanwhile on the host, are not this one's."""
    need("tbf")
    opened: list[sandboxes.Sandbox] = []
    open_box = sandboxes.Sandbox.open

    def recording(workdir: Path) -> sandboxes.Sandbox:
        opened.append(open_box(workdir))
        return opened[-1]

    monkeypatch.setattr(sandboxes.Sandbox, "open", recording)
    (result,) = asyncio.run(_points(NetworkSpec(rate_mbit=20), mlp_meta, mlp_path, tmp_path))
    assert result.network is not None and result.network.rate_mbit == 20 and result.network.profile == "custom"
    assert result.network.rtt_ms is not None and 0 < result.network.rtt_ms < 50
    assert result.ok > 0 and result.errors == 0
    assert [box.outer for box in opened] and all(box.outer.startswith("bfh") for box in opened), opened
    left = [box.outer for box in opened if f" {box.outer}@" in links() or Path(f"/sys/class/net/{box.outer}").exists()]
    assert left == [] and not [box.netns for box in opened if Path(f"/run/netns/{box.netns}").exists()]
