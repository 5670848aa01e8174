"""Canonical bundles: the leader reads meta.json at upload, carries depth/width/kind into the leaderboard, and the
heat map groups by them (real leader app, SecantusDB, the real follower-facing report API)."""

from __future__ import annotations

from typing import Any

import pytest

from common.formats.bundle import ONNX_MEMBER, write_bundle
from tests.integration.leader.analysis_seed import pct, seed_job
from tests.integration.leader.conftest import ADMIN, Leader
from tests.unit.leader.onnx_models import identity_model

pytestmark = pytest.mark.integration


def bundle(meta: dict[str, Any]) -> bytes:
    """A bundle zip of a valid ONNX model and the given meta.json."""
    return write_bundle({ONNX_MEMBER: identity_model()}, meta)


def canon_meta(depth: int, width: int = 8, kind: str = "fc") -> dict[str, Any]:
    """meta.json as follower.convert.canonical writes it (spec + cost_per_inference)."""
    return {
        "generator": "benchfleet.canonical",
        "spec": {"kind": kind, "depth": depth, "width": width, "input_size": 4, "seed": 0},
        "cost_per_inference": {"flops": 1000 * depth, "params": 10, "bytes": 400 * depth},
    }


def upload_bundle(leader: Leader, name: str, data: bytes) -> Any:
    return leader.client.post(
        "/api/v1/models",
        headers=ADMIN,
        data={"name": name, "version": "1", "format": "bundle"},
        files={"file": ("model.zip", data, "application/zip")},
    )


def test_heat_map_groups_canonical_points_by_depth(leader: Leader) -> None:
    leader.upload_model()  # a plain ONNX model: its points have no depth and stay out of a depth map
    for depth in (1, 3):
        response = upload_bundle(leader, f"canon-fc-d{depth}-w8-s4", bundle(canon_meta(depth)))
        assert response.status_code == 201, response.text
        assert response.json()["canonical"] == {
            "kind": "fc", "depth": depth, "width": 8, "input_size": 4, "flops": 1000 * depth, "bytes": 400 * depth
        }
    stored = leader.client.get("/api/v1/models/canon-fc-d3-w8-s4/1", headers=ADMIN)
    assert stored.status_code == 200 and stored.json()["canonical"]["depth"] == 3, stored.text

    def metrics_for(depth: int) -> Any:
        # p99 grows with depth and batch so each heat-map cell has a known mean.
        def metrics(backend: str, batch: int, rate: float) -> dict[str, Any]:
            return {"latency_ms": pct(depth * 10 + batch), "achieved_rate": rate, "valid": True, "invalid_reasons": []}

        return metrics

    for depth in (1, 3):
        seed_job(
            leader, name=f"d{depth}", model=f"canon-fc-d{depth}-w8-s4:1", backends=["onnxruntime"], batches=[1, 4],
            rates=[50], p99_slo=100, follower_id="f1", metrics=metrics_for(depth),
        )
    seed_job(
        leader, name="plain", backends=["onnxruntime"], batches=[1], rates=[50], p99_slo=100, follower_id="f1",
        metrics=metrics_for(7),
    )

    rows = leader.client.get("/api/v1/leaderboard", headers=ADMIN, params={"filter": "depth=3", "limit": 100}).json()
    assert rows["total"] == 2
    assert {(r["kind"], r["depth"], r["width"], r["flops_per_inference"]) for r in rows["rows"]} == {("fc", 3, 8, 3000)}

    heat = leader.client.get("/api/v1/heatmap", headers=ADMIN, params={"metric": "p99_ms", "x": "depth", "y": "batch_size"})
    assert heat.status_code == 200, heat.text
    body = heat.json()
    assert body["xs"] == ["1", "3"] and body["ys"] == ["1", "4"]
    cells = {(c["x"], c["y"]): (c["value"], c["points"]) for c in body["cells"]}
    assert cells == {("1", "1"): (11, 1), ("1", "4"): (14, 1), ("3", "1"): (31, 1), ("3", "4"): (34, 1)}

    by_kind = leader.client.get("/api/v1/heatmap", headers=ADMIN, params={"x": "kind", "y": "width"}).json()
    assert [(c["x"], c["y"], c["points"]) for c in by_kind["cells"]] == [("fc", "8", 4)]
    # Axes that every row has still include the plain model's point.
    by_model = leader.client.get("/api/v1/heatmap", headers=ADMIN, params={"x": "model", "y": "batch_size"}).json()
    assert "ident:1" in by_model["xs"]

    page = leader.client.get("/analysis", headers=ADMIN, params={"x": "depth", "y": "width"})
    assert page.status_code == 200 and "depth" in page.text, page.text[:300]

    bad = leader.client.get("/api/v1/heatmap", headers=ADMIN, params={"x": "nope"})
    assert bad.status_code == 400 and bad.json()["field"] == "x"


def test_bundle_meta_is_parsed_safely(leader: Leader) -> None:
    # A bundle whose meta has no canonical spec is a plain bundle.
    plain = upload_bundle(leader, "plainbundle", bundle({"generator": "hand-made"}))
    assert plain.status_code == 201 and plain.json()["canonical"] is None, plain.text
    # A malformed spec is refused naming the file, and nothing is stored.
    bad = upload_bundle(leader, "badbundle", bundle({"spec": {"kind": "fc", "depth": "deep", "width": 8, "input_size": 4}}))
    assert 400 <= bad.status_code < 500 and bad.json()["field"] == "file", bad.text
    assert "depth" in bad.json()["message"] or "depth" in bad.text
    assert leader.client.get("/api/v1/models/badbundle/1", headers=ADMIN).status_code == 404
    not_json = write_bundle({ONNX_MEMBER: identity_model()}, {}).replace(b"{}", b"{x")
    broken = upload_bundle(leader, "brokenmeta", not_json)
    assert 400 <= broken.status_code < 500 and broken.json()["field"] == "file", broken.text
