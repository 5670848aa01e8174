"""A search through the whole system against a FIFO server of known capacity (a target serving one request at a time,
8 ms each, in virtual time: its capacity does not depend on this host's CPU): every probe after the first started on a
drained server and says how long the drain took; the answer's bracket and its stated interval are consistent (the
knee, an M/D/1 queue's p99 at the SLO over a probe's window, is printed beside it); the point's stored records are the
chosen probe's, its count and rate; every probe keeps its own records; the load the CLI and the job page show is the
rate found, with the probes (the CLI at 80 columns: tests/unit/benchfleet/test_render_search.py).

How close below the knee the answer lands depends on how this host stalls during the probes, not on the search: that
claim, with the stated interval holding the knee run after run, is bench/search_fifo.py's (docs/search/)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest

from common.procs import SupervisedProcess, free_port, http_ready
from common.wire.records import decode, measured_mask
from tests.e2e.test_walking_skeleton import _wait_done

pytestmark = pytest.mark.e2e

SERVER = Path(__file__).resolve().parents[1] / "integration" / "follower" / "capacity_server.py"
SERVICE_MS = 8.0  # long beside the event loop's own work per request, and few requests/s on a 2-core host
SLO_MS = 80.0
WARMUP_S, DURATION_S = 1.0, 5.0  # each probe's, longer below 101 req/s so that it holds 459 requests for its p99
# From half the knee: a probe at 10 req/s would last 50 s (for its 459 requests) to show what one at 50 shows in 10 s.
PRECISION = 0.1
SEARCH = f"low: 50, high: 120, precision: {PRECISION}, max_steps: 16"


def probe_p99s(rate: float, service_s: float, warmup_s: float, duration_s: float, replications: int = 2000) -> np.ndarray:
    """The p99 sojourn each of `replications` probes reads from a single FIFO worker of constant service time under
    Poisson arrivals at `rate`: an empty queue at the probe's start (the search waits for the drain), arrivals over
    the warm-up and the window, the p99 over the window's (Lindley's recursion; one fixed draw for every rate)."""
    span = warmup_s + duration_s
    most = int(span / service_s * 1.5) + 50  # arrivals at the highest rate a single worker could carry, with room
    gaps = np.random.default_rng(1).exponential(1.0, (replications, most)) / rate
    arrived = np.cumsum(gaps, axis=1)
    wait, sojourn = np.zeros(replications), np.empty_like(gaps)
    for i in range(most):
        if i:
            wait = np.maximum(0.0, wait + service_s - gaps[:, i])
        sojourn[:, i] = wait + service_s
    window = (arrived >= warmup_s) & (arrived < span)
    return np.array([np.quantile(sojourn[k][window[k]], 0.99) for k in range(replications)])


def md1_knee(service_s: float, slo_s: float, warmup_s: float, duration_s: float, passing: float = 0.5) -> float:
    """The Poisson rate at which a probe of this warm-up and window passes p99 <= slo with probability `passing`: with
    0.5, the knee a search's probes measure (a probe's p99 is at the limit as often above as below; about 104 req/s
    for 8 ms and 80 ms over 1 + 5 s, and 114.4 for 5 ms and 25 ms over 2 + 12 s, where 90% of probes pass at 99.5)."""
    low, high = 1.0, 1 / service_s
    for _ in range(14):
        mid = (low + high) / 2
        share = float(np.mean(probe_p99s(mid, service_s, warmup_s, duration_s, 400 if passing == 0.5 else 4000) <= slo_s))
        low, high = (mid, high) if share >= passing else (low, mid)
    return low


@contextlib.contextmanager
def virtual_fifo(log_dir: Path, service_ms: float) -> Iterator[str]:
    """The single-worker FIFO server in virtual time (capacity 1000/service_ms req/s whatever the CPU does), ready;
    its URL. Also bench/search_fifo.py's server."""
    port = free_port()
    argv = [sys.executable, str(SERVER), "--port", str(port), "--service-ms", str(service_ms), "--workers", "1", "--virtual"]
    with SupervisedProcess([*argv, "--watch-stalls"], name="virtual FIFO server", log_path=log_dir / "server.log") as proc:
        proc.wait_ready(http_ready(f"http://127.0.0.1:{port}/ready"), timeout_s=30)
        yield f"http://127.0.0.1:{port}"


@pytest.fixture(scope="module")
def fifo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with virtual_fifo(tmp_path_factory.mktemp("fifo"), SERVICE_MS) as url:
        yield url


@pytest.mark.timeout(600)  # about 6 probes of 5 to 10 s and their drains
def test_a_search_of_a_server_of_known_capacity_drains_between_probes_and_shows_its_answer(fleet, fifo: str) -> None:  # type: ignore[no-untyped-def]
    fleet.start_follower("f-search")
    with fleet.client() as client:
        job = client.submit_yaml(f"""
name: fifo-search
model: fifo
inputs: [{{name: input, datatype: FP32, shape: [-1, 4]}}]
target: {{url: "{fifo}", protocol: kserve-http}}
load: {{pattern: poisson, duration: {DURATION_S:g}s, warmup: {WARMUP_S:g}s, search: {{{SEARCH}}}}}
slo: {{p99_ms: {SLO_MS:g}}}
""")
        results = _wait_done(client, job.id, timeout_s=400)
    (point,) = results.points
    answer = point.search
    assert answer is not None and answer.over == "rate"
    stats = httpx.get(f"{fifo}/stats").json()
    assert stats["virtual"] and stats["service_s"] == SERVICE_MS / 1000  # the server's capacity is the one configured
    knee = md1_knee(SERVICE_MS / 1000, SLO_MS / 1000, WARMUP_S, DURATION_S)
    print(
        f"search against the FIFO server: {answer.summary()}; M/D/1 knee {knee:.1f} req/s (a probe passes there half"
        f" the time); the server saw"
        f" {len(stats['stalls_ms'])} host stalls of 20 ms or more (longest {max(stats['stalls_ms'], default=0.0):g} ms)"
    )
    for k, p in enumerate(answer.probes):
        print(
            f"  probe {k}: {p.load:g} req/s after a {p.drain_s} s drain, p99 {p.p99_ms} ms (95% {p.p99_ci_ms}), "
            f"passed {p.passed}, {p.reasons}"
        )
    assert answer.stopped in ("resolved", "out_of_probes"), answer
    assert answer.found is not None and answer.lowest_fail is not None and len(answer.probes) <= 16
    if answer.stopped == "resolved":
        assert (answer.lowest_fail - answer.found) / answer.lowest_fail <= PRECISION
    else:
        assert any(n.startswith("stopped short after 16 probes") for n in answer.notes), answer.notes
    # Every probe after the first waited for the server to work off the one before (the ceiling, 120 req/s against a
    # capacity of 125, leaves it behind), and started on a drained server.
    assert answer.probes[0].drain_s is None and all(p.drain_s is not None for p in answer.probes[1:]), answer.probes
    assert all(p.drained for p in answer.probes), answer.probes
    # The stated interval holds the bracket: it only widens it by the probes' own uncertainty.
    assert answer.limit_low is None or answer.limit_low <= answer.found
    assert answer.limit_high is None or answer.limit_high >= answer.lowest_fail
    # Where the answer lies against the knee is not asserted here: a 5 s probe passes once in a thousand even at 125
    # req/s (the capacity), and how far below the knee it lands depends on this host's stalls. The stated interval
    # holding the knee, run after run, is bench/search_fifo.py's claim (docs/search/fifo_interval_2core.log).
    failed = [p for p in answer.probes if p.load == answer.lowest_fail]
    assert failed and not any(p.passed for p in failed), answer.probes
    # The point is the chosen probe's run, at the rate found.
    chosen = answer.probes[answer.chosen or 0]
    assert chosen.load == answer.found == point.point.rate and chosen.passed and point.valid
    assert point.latency_ms is not None and chosen.p99_ms == point.latency_ms.p99 <= SLO_MS
    headers = {"Authorization": f"Bearer {fleet.admin_token}"}
    base = f"{fleet.url}/api/v1/jobs/{job.id}/points/0/records"
    own = httpx.get(base, headers=headers)
    assert own.status_code == 200
    arrays = decode(own.content)
    measured = measured_mask(arrays, warmup_s=point.point.warmup_s, measured_s=point.measured_s)
    assert int(measured.sum()) == point.requests
    assert int(measured.sum()) / point.measured_s == pytest.approx(answer.found, rel=0.2)
    blobs = [httpx.get(base, params={"probe": k}, headers=headers) for k in range(len(answer.probes))]
    assert all(b.status_code == 200 for b in blobs)
    assert blobs[answer.chosen or 0].content == own.content
    assert len({b.content for b in blobs}) == len(blobs)  # each probe's own run
    # The CLI and the job page show the rate found, the interval and every probe.
    env = {
        "PATH": os.environ.get("PATH", ""),
        "BENCHFLEET_URL": fleet.url,
        "BENCHFLEET_TOKEN": fleet.admin_token,
        "COLUMNS": "80",
        "TERM": "dumb",
        "PYTHONPATH": os.environ.get("PYTHONPATH", ""),
    }
    shown = subprocess.run(
        [sys.executable, "-m", "benchfleet", "results", job.id], capture_output=True, text=True, env=env, timeout=60, check=False
    )
    assert shown.returncode == 0, shown.stderr
    summary = answer.summary()
    assert f"{answer.found:g} req/s (fails at {answer.lowest_fail:g})" in summary
    assert "search, point 0:" in shown.stdout and f"fails at {answer.lowest_fail:g}" in shown.stdout
    with httpx.Client(base_url=fleet.url) as browser:
        assert browser.post("/login", data={"token": fleet.admin_token, "next": "/"}).status_code in (200, 303)
        page = browser.get(f"/jobs/{job.id}").text
    assert 'id="search-0"' in page and summary in page.replace("&gt;", ">").replace("&lt;", "<")
    assert page.count('class="probe ') == len(answer.probes)
    assert "Search #0: p99 against load" in page
