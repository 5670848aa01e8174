"""A search through the whole system against a single-worker FIFO server of known capacity (a target: one request at
a time, 8 ms each): the answer lies within its resolution of the true knee (an M/D/1 queue's p99 at the SLO, from
the server's own service time, bracketed); the point's stored records are the chosen probe's, its count and rate; every probe
keeps its own records; the load the CLI and the job page show is the rate found, with the probes (the CLI at 80
columns: tests/unit/benchfleet/test_render_search.py)."""

from __future__ import annotations

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


def md1_knee(service_s: float, slo_s: float, n: int = 100_000) -> float:
    """The Poisson rate at which a single FIFO worker of constant service time keeps p99 sojourn at the SLO (Lindley's
    recursion on a fixed draw, bisected)."""
    gaps = np.random.default_rng(1).exponential(1.0, n)

    def p99(rate: float) -> float:
        wait, sojourn = 0.0, np.empty(n)
        for i, gap in enumerate(gaps / rate):
            wait = max(0.0, wait + service_s - gap) if i else 0.0
            sojourn[i] = wait + service_s
        return float(np.quantile(sojourn, 0.99))

    low, high = 1.0, 1 / service_s
    for _ in range(16):
        low, high = ((low + high) / 2, high) if p99((low + high) / 2) <= slo_s else (low, (low + high) / 2)
    return low


@pytest.fixture(scope="module")
def fifo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    port = free_port()
    argv = [sys.executable, str(SERVER), "--port", str(port), "--service-ms", str(SERVICE_MS), "--workers", "1", "--watch-stalls"]
    log = tmp_path_factory.mktemp("fifo") / "server.log"
    with SupervisedProcess(argv, name="single-worker FIFO server", log_path=log) as proc:
        proc.wait_ready(http_ready(f"http://127.0.0.1:{port}/ready"), timeout_s=30)
        yield f"http://127.0.0.1:{port}"


@pytest.mark.timeout(600)  # up to 10 probes of 5 s and their drains
def test_a_search_finds_the_knee_of_a_server_of_known_capacity_and_shows_it(fleet, fifo: str) -> None:  # type: ignore[no-untyped-def]
    fleet.start_follower("f-search")
    with fleet.client() as client:
        job = client.submit_yaml(f"""
name: fifo-search
model: fifo
inputs: [{{name: input, datatype: FP32, shape: [-1, 4]}}]
target: {{url: "{fifo}", protocol: kserve-http}}
load: {{pattern: poisson, duration: 5s, warmup: 1s, search: {{low: 10, high: 120, precision: 0.05, max_steps: 16}}}}
slo: {{p99_ms: {SLO_MS:g}}}
""")
        results = _wait_done(client, job.id, timeout_s=400)
    (point,) = results.points
    answer = point.search
    assert answer is not None and answer.over == "rate"
    stats = httpx.get(f"{fifo}/stats").json()
    # The server's true service time lies between the handler's own time (a floor: the event loop also spends CPU on
    # each request outside it) and that plus all the process's CPU outside handlers (a ceiling: it includes the loop's
    # idle work and an overloaded probe's extra churn), so the true knee lies between the two knees they give.
    service_s, handler_s = stats["service_s"], stats["handler_s"]
    knee, knee_high = md1_knee(service_s, SLO_MS / 1000), md1_knee(handler_s, SLO_MS / 1000)
    print(
        f"search against the FIFO server: {answer.summary()}; M/D/1 knee {knee:.1f} to {knee_high:.1f} req/s"
        f" (service {1e3 * service_s:.3f} ms, handler {1e3 * handler_s:.3f} ms); the server saw {len(stats['stalls_ms'])}"
        f" host stalls of 20 ms or more (longest {max(stats['stalls_ms'], default=0.0):g} ms)"
    )
    for k, p in enumerate(answer.probes):
        print(f"  probe {k}: {p.load:g} req/s, p99 {p.p99_ms} ms (95% {p.p99_ci_ms}), passed {p.passed}, {p.reasons}")
    # Within its resolution of the knee, with the p99's sampling noise over 5 s probes as margin (10%). Near the knee
    # a 5 s probe's p99 interval often holds the limit, and a stall on this host makes a probe invalid (the generator
    # sent late): either is repeated, which spends probes, so 16 leave room; stopping short is said, never hidden.
    assert answer.stopped in ("resolved", "out_of_probes"), answer
    assert answer.found is not None and answer.lowest_fail is not None and len(answer.probes) <= 16
    if answer.stopped == "resolved":
        assert (answer.lowest_fail - answer.found) / answer.lowest_fail <= 0.05
    else:
        assert any(n.startswith("stopped short after 16 probes") for n in answer.notes), answer.notes
    # Above, noise cannot carry an answer: the host's stalls (leader, follower, generator, server and databases share 2
    # cores) only ever add to a probe's p99, so they make a probe fail early, never pass late.
    assert answer.found <= 1.10 * knee_high, (answer.found, knee, knee_high, stats)
    # Below, how far under the knee the answer lies depends on how this host stalls, not on the search (full CI runs
    # found 72, 54.3 and 33.3 req/s against knees of about 85 to 92: at 34.6 req/s one probe failed its p99 of 80 ms).
    # So an answer under half the knee must come with a stall the server itself saw (a watcher thread in it woke at
    # least half the SLO late): a search that stops low on a quiet host still fails here, and so does one that never
    # leaves its floor.
    stalls = stats["stalls_ms"]
    assert answer.found > 10
    assert answer.found >= 0.5 * knee or max(stalls, default=0.0) >= SLO_MS / 2, (answer.found, knee, knee_high, stats)
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
