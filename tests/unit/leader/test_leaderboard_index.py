"""The leaderboard index's sort, filter and paging against a brute-force Python sort."""

from __future__ import annotations

import random
from typing import Any

import pytest

from common.errors import InvalidRequest
from leader.analysis.leaderboard import LeaderboardIndex, parse_filter


def rows(n: int) -> list[dict[str, Any]]:
    rng = random.Random(7)
    out = []
    for i in range(n):
        out.append(
            {
                "_id": f"j{i % 13}:{i}",
                "job_id": f"j{i % 13}",
                "job_name": "x",
                "attempt": 1,
                "index": i,
                "model": f"m{i % 3}",
                "backend": rng.choice(["onnxruntime", "triton"]),
                "hardware": "cpu",
                "follower_id": "f",
                "batch_size": rng.choice([1, 8]),
                "pattern": "poisson",
                "rate": 50.0,
                "throughput": rng.choice([None, 10.0, 20.0, rng.uniform(0, 100)]),
                "p50_ms": 1.0,
                "p99_ms": rng.choice([None, 5.0, rng.uniform(1, 50)]),
                "valid": rng.random() > 0.2,
                "slo_p99_ms": 20.0,
                "slo_met": None,
                "requests": 1,
                "errors": 0,
                "updated_ns": i,
            }
        )
    return out


@pytest.mark.parametrize(
    "sort,order,filters",
    [
        ("p99_ms", "asc", []),
        ("p99_ms", "desc", ["backend:triton"]),
        ("throughput", "desc", ["valid:true", "batch>=8"]),
        ("backend", "asc", ["p99<20"]),
        ("model", "desc", ["model!=m1"]),
    ],
)
def test_pages_match_a_brute_force_sort(sort: str, order: str, filters: list[str]) -> None:
    data = rows(500)
    index = LeaderboardIndex()
    for doc in data:
        index.add(doc)
    preds = {
        "backend:triton": lambda r: r["backend"] == "triton",
        "valid:true": lambda r: r["valid"] is True,
        "batch>=8": lambda r: r["batch_size"] >= 8,
        "p99<20": lambda r: r["p99_ms"] is not None and r["p99_ms"] < 20,
        "model!=m1": lambda r: r["model"] != "m1",
    }
    matching = [r for r in data if all(preds[f](r) for f in filters)]
    present = sorted((r for r in matching if r[sort] is not None), key=lambda r: r["_id"])
    present.sort(key=lambda r: r[sort], reverse=order == "desc")  # stable: ties stay in id order
    expected = present + sorted((r for r in matching if r[sort] is None), key=lambda r: r["_id"])
    for offset in (0, 7, 40):
        page = index.query(sort=sort, order=order, filters=filters, limit=25, offset=offset)
        assert page.total == len(matching)
        assert [r.id for r in page.rows] == [r["_id"] for r in expected[offset : offset + 25]]


def test_bad_filters_name_the_field() -> None:
    for text in ("nope:1", "p99<abc", "backend<3", "garbage"):
        with pytest.raises(InvalidRequest) as info:
            parse_filter(text)
        assert info.value.field == "filter"
