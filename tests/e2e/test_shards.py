"""Load shards through the whole system (#19): two follower processes drive one hand-started endpoint at once, each
its seeded share, from one instant; the coordinator's merged point is exactly its shards' records concatenated; a
shard whose follower is SIGKILLed mid-point makes the point invalid, naming that shard."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator

import httpx
import numpy as np
import pytest

from common.stats import summarize_ns
from common.wire import records as fmt
from common.wire.jobs import JobResults
from follower.point.shard import SKEW_LIMIT_MS
from tests.e2e.endpoint_servers import GatedEndpoint, gated_ort
from tests.e2e.test_walking_skeleton import _wait_done, _wait_until

pytestmark = pytest.mark.e2e
FOLLOWERS = ("shard-a", "shard-b")


@pytest.fixture(scope="module")
def gated(fleet, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatedEndpoint]:  # type: ignore[no-untyped-def]
    for follower in FOLLOWERS:
        fleet.start_follower(follower)
    with gated_ort(tmp_path_factory.mktemp("shard-ort"), "mlp-shards") as endpoint:
        with fleet.client() as client:
            client.put_secret("shard-key", endpoint.key, header="X-Api-Key")
        yield endpoint


def _job_yaml(name: str, endpoint: GatedEndpoint, rate: float, duration: str) -> str:
    return f"""
name: {name}
model: {endpoint.model}
load: {{pattern: poisson, rate: {rate:g}, duration: {duration}, warmup: 0.5s}}
target: {{url: "{endpoint.url}", protocol: kserve-http, secret: shard-key, shards: 2}}
"""


def _shard_latencies(fleet, job_id: str, shard: int, warmup_s: float, duration_s: float) -> np.ndarray:  # type: ignore[no-untyped-def]
    """A shard's own measured latencies (ns), from its records as the leader keeps them."""
    answer = httpx.get(f"{fleet.url}/api/v1/jobs/{job_id}/shards/{shard}/points/0/records",
                       headers={"Authorization": f"Bearer {fleet.admin_token}"})  # fmt: skip
    assert answer.status_code == 200, answer.text
    arrays = fmt.decode(answer.content)
    measured = fmt.measured_mask(arrays, warmup_s=warmup_s, measured_s=duration_s) & (arrays["status"] == fmt.OK)
    return (arrays["done_ns"] - arrays["intended_ns"])[measured]


def test_two_followers_drive_one_point_and_its_percentiles_are_their_records_concatenated(fleet, gated) -> None:  # type: ignore[no-untyped-def]
    with fleet.client() as client:
        job = client.submit_yaml(_job_yaml("two-shards", gated, 200, "3s"))
        results: JobResults = _wait_done(client, job.id, timeout_s=180)
        parts = [client.job(p) for p in client.job(job.id).parts]
    (point,) = results.points
    # The claim is the merge, not this host's quiet: a stall of the shared VM can push a shard's send lag past the 1 ms
    # rule (CI saw 80 ms), with the cap reason it brings (as in the walking skeleton), and can make the clock offsets'
    # round trips slow (a run here knew them to 1.18 ms). The skew reason is judged exactly, from the point's own
    # recorded figures; no other reason may appear.
    codes = {reason.code for reason in point.reasons}
    assert codes - {"shard_skew"} <= {"send_lag", "cap_reached"}, point.invalid_reasons
    assert not (codes & {"send_lag", "cap_reached"}) or "send_lag" in codes, point.invalid_reasons
    assert point.valid == (not codes), point.invalid_reasons
    assert point.shards is not None and [s.shard for s in point.shards] == [0, 1]
    unsure = max(s.offset_uncertainty_ms or 0.0 for s in point.shards)
    skewed = (point.shard_skew_ms is not None and point.shard_skew_ms > SKEW_LIMIT_MS) or unsure > SKEW_LIMIT_MS
    assert ("shard_skew" in codes) == skewed, (point.shard_skew_ms, unsure, point.invalid_reasons)
    assert all(s.state == "merged" for s in point.shards)
    # Each shard ran on its own follower, as its part says, and the two shares make the whole schedule.
    assert {s.follower_id for s in point.shards} == set(FOLLOWERS)
    assert [p.spec.requires.follower for p in parts] == [s.follower_id for s in point.shards]
    # The two shares are the whole schedule (warm-up included), with no request in both.
    assert sum(s.requests for s in point.shards) >= point.requests
    assert all(s.offset_uncertainty_ms is not None and s.offset_uncertainty_ms >= 0 for s in point.shards)
    assert point.shard_skew_ms is not None
    # Exact: the merged percentiles are those of both shards' measured latencies concatenated.
    lat = np.concatenate([_shard_latencies(fleet, job.id, k, point.point.warmup_s, point.measured_s) for k in (0, 1)])
    assert len(lat) == point.ok
    assert summarize_ns(lat) == point.latency_ms
    # The point page shows the shards, with links to each one's records.
    with httpx.Client(base_url=fleet.url) as browser:
        assert browser.post("/login", data={"token": fleet.admin_token, "next": "/leaderboard"}).status_code in (200, 303)
        page = browser.get(f"/jobs/{job.id}/points/0").text
    assert 'id="shards"' in page and all(f in page for f in FOLLOWERS)
    assert f"/api/v1/jobs/{job.id}/shards/1/points/0/records" in page


def _windows(fleet, job_id: str) -> int:  # type: ignore[no-untyped-def]
    """Measurement windows the job's follower has streamed for its point 0 so far."""
    answer = httpx.get(f"{fleet.url}/api/v1/jobs/{job_id}/progress", headers={"Authorization": f"Bearer {fleet.admin_token}"})
    points = answer.json().get("points") or [] if answer.status_code == 200 else []
    return sum(len(p.get("windows") or []) for p in points if p.get("index") == 0)


def test_a_shard_follower_sigkilled_mid_point_makes_the_point_invalid_naming_it(fleet, gated) -> None:  # type: ignore[no-untyped-def]
    with fleet.client() as client:
        job = client.submit_yaml(_job_yaml("shard-killed", gated, 100, "8s"))
        parts = client.job(job.id).parts
        victim = client.job(parts[1]).spec.requires.follower
        assert victim in FOLLOWERS
        # Mid-point: the victim's own share has closed two measurement windows of the point (its live progress).
        _wait_until(lambda: _windows(fleet, parts[1]) >= 2, 120, "the point to be under way on the victim")
        pid = fleet.procs[victim].pid
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        killed_at = time.monotonic()
        results = _wait_done(client, job.id, timeout_s=240)
    (point,) = results.points
    assert not point.valid
    lost = [r for r in point.reasons if r.code == "shard_lost"]
    assert lost, point.invalid_reasons
    assert "shard 1 of 2" in lost[0].text and victim in lost[0].text, lost[0].text
    assert point.shards is not None and point.shards[1].state == "lost"
    assert point.shards[0].state == "merged"
    assert time.monotonic() - killed_at < 200
