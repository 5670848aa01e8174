"""The robust outlier test (leader/analysis/anomalies.py): median and MAD, not a mean dragged by the outlier."""

from __future__ import annotations

import random

from leader.analysis import anomalies


def rows(values: dict[str, float]) -> list[dict[str, object]]:
    return [{"follower_id": f, "job_id": f"job-{f}", "backend": "onnxruntime", "batch_size": 1, "pattern": "constant",
             "rate": 50.0, "p50_ms": v} for f, v in values.items()]  # fmt: skip


def test_four_equal_followers_with_noise_flag_none_and_a_slowed_one_is_flagged() -> None:
    rng = random.Random(3)
    for _ in range(200):  # equal machines: 8% noise either way never makes an outlier
        equal = {f"n{i}": 2.0 * rng.uniform(0.92, 1.08) for i in range(4)}
        assert anomalies.across_followers(rows(equal), name="c", metric="p50_ms").outliers == []
    slowed = {"n1": 2.0, "n2": 2.06, "n3": 3.4, "n4": 1.97}
    found = anomalies.across_followers(rows(slowed), name="c", metric="p50_ms")
    assert found.outliers == ["n3"]
    n3 = next(p for p in found.points if p.follower_id == "n3")
    assert round(n3.median_ms, 6) == 2.03 and n3.z > anomalies.Z_LIMIT and round(n3.deviation, 2) == 0.67


def test_a_faster_follower_and_a_class_of_two_are_not_outliers() -> None:
    faster = rows({"n1": 2.0, "n2": 2.0, "n3": 0.5, "n4": 2.1})
    assert anomalies.across_followers(faster, name="c", metric="p50_ms").outliers == []
    pair = anomalies.across_followers(rows({"n1": 2.0, "n2": 9.0}), name="c", metric="p50_ms")
    assert pair.outliers == [] and pair.points == []  # a median of two cannot say which one is odd


def test_a_follower_slower_than_its_own_history_is_flagged() -> None:
    earlier = {("n1", "k"): [2.0, 2.1, 1.95, 2.02], ("n2", "k"): [2.0, 2.1], ("n3", "k"): [2.0, 2.05, 1.98]}
    judged = anomalies.against_history({("n1", "k"): 3.0, ("n2", "k"): 9.0, ("n3", "k"): 2.04}, earlier)
    assert [(h.follower_id, h.outlier) for h in judged] == [("n1", True), ("n3", False)]  # n2: too little history
