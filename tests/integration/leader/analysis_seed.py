"""Seed finished jobs through the leader's real API (follower routes), with raw records, for analysis tests."""

from __future__ import annotations

import uuid
from typing import Any

import numpy as np

from common.wire import records
from tests.integration.leader.conftest import ADMIN, YAML, Leader, point_result


def latencies(n: int, *, scale_ms: float, seed: int) -> np.ndarray:
    """A log-normal latency sample in ms (a serving-like tail)."""
    rng = np.random.default_rng(seed)
    return rng.lognormal(mean=np.log(scale_ms), sigma=0.35, size=n)


def npz(lat_ms: np.ndarray, *, warmup_ms: np.ndarray | None = None, warmup_s: float = 0.0, measured_s: float = 2.0) -> bytes:
    """Records as the follower's writer stores them (common.wire.records): `warmup_ms` answers spread over the warm-up,
    then `lat_ms` over the measured window, intended times from a run start of 0."""
    warm = np.zeros(0) if warmup_ms is None else warmup_ms
    warm_at = (np.arange(warm.size) * (warmup_s * 1e9 / max(warm.size, 1))).astype(np.int64)
    measured_at = int(warmup_s * 1e9) + (np.arange(lat_ms.size) * (measured_s * 1e9 / lat_ms.size)).astype(np.int64)
    intended = np.concatenate([warm_at, measured_at])
    done = intended + (np.concatenate([warm, lat_ms]) * 1e6).astype(np.int64)
    n = intended.size
    columns = {"intended_ns": intended, "sent_ns": intended + 10_000, "first_byte_ns": done - 1000, "done_ns": done,
               "status": np.full(n, 200), "capped": np.zeros(n)}  # fmt: skip
    return records.encode(columns, {}, start_ns=0)


def seed_job(
    leader: Leader,
    *,
    name: str,
    backends: list[str],
    batches: list[int],
    rates: list[float],
    p99_slo: float,
    follower_id: str,
    metrics: Any,
    raw: Any = None,
    model: str = "ident:1",
    warmup_s: float = 0.0,
    warmup_raw: Any = None,
    extra: str = "",
) -> str:
    """Submit a job, claim it as `follower_id`, report one point per grid entry and finish it; returns the job id.

    metrics(backend, batch, rate) -> dict of PointResult overrides; raw(backend, batch, rate) -> latencies ms or None
    (the measured window's), warmup_raw(backend, batch, rate) -> the warm-up's latencies ms; `extra`: more spec lines.
    """
    spec = (
        f"name: {name}\nmodel: {model}\nbackends: [{', '.join(backends)}]\nbatch_sizes: {batches}\n"
        f"load: {{rate: {rates}, duration: 2s, warmup: {warmup_s}s, allow_short: true}}\nslo: {{p99_ms: {p99_slo}}}\n{extra}"
    )
    response = leader.client.post("/api/v1/jobs", headers={**ADMIN, **YAML}, content=spec)
    assert response.status_code == 201, response.text
    job_id = response.json()["id"]
    # One real follower per leader claims every job (placement picks among live followers); `follower_id` is the
    # machine the result says it ran on (its environment), which is what the analysis groups by.
    agent = leader.__dict__.setdefault("_seed_agent", (f"agent-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex))
    if agent[0] not in leader.credentials:
        leader.register(agent[0], agent[1], backends=["onnxruntime", "triton", "torchscript"])
    job = leader.wait_dispatched(job_id)
    assert job["follower_id"] == agent[0]
    claim = leader.client.post(
        f"/api/v1/jobs/{job_id}/claim",
        headers=leader.as_follower(agent[0]),
        json={"attempt": job["attempt"], "follower_id": agent[0], "incarnation": agent[1]},
    )
    assert claim.status_code == 200, claim.text
    for point in claim.json()["points"]:
        backend, batch, rate = point["backend"], point["batch_size"], point["rate"]
        body = point_result(point["index"], follower_id, backend=backend, batch=batch)
        body["environment"]["host"] = follower_id
        body["point"] = point
        body.update(metrics(backend, batch, rate))
        report = {"attempt": 1, "follower_id": agent[0], "result": body}
        r = leader.client.post(f"/api/v1/jobs/{job_id}/points", headers=leader.as_follower(agent[0]), json=report)
        assert r.status_code == 200, r.text
        lat = raw(backend, batch, rate) if raw else None
        if lat is not None:
            r = leader.client.post(
                f"/api/v1/jobs/{job_id}/points/{point['index']}/records?attempt=1",
                headers={**leader.as_follower(agent[0]), "Content-Type": "application/octet-stream"},
                content=npz(lat, warmup_ms=warmup_raw(backend, batch, rate) if warmup_raw else None, warmup_s=warmup_s,
                            measured_s=body["measured_s"]),
            )
            assert r.status_code == 204, r.text
    r = leader.client.post(
        f"/api/v1/jobs/{job_id}/finish",
        headers=leader.as_follower(agent[0]),
        json={"attempt": 1, "follower_id": agent[0], "state": "succeeded"},
    )
    assert r.status_code == 200, r.text
    return job_id


def pct(p99: float) -> dict[str, float]:
    """A Percentiles body with the given p99 (others scaled from it)."""
    return {
        "count": 2000,
        "mean": p99 / 2,
        "p50": p99 / 2,
        "p90": p99 * 0.8,
        "p95": p99 * 0.9,
        "p99": p99,
        "p999": p99 * 1.3,
        "max": p99 * 1.6,
    }
