"""Who drives a sharded job: distinct live followers with the labels, least busy first; refused with the figures
when the fleet has too few, or too little generator capacity; `shards: auto` sized from the followers' generator
cost per request."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from common.errors import InvalidSpec
from common.spec.grid import expand
from common.spec.job import JobSpec
from common.wire.followers import FollowerInfo, FollowerView, HeldJob
from leader.placement.shard_choice import choose_shard_followers, sized


def _view(fid: str, *, state: str = "ready", held: int = 0, labels: dict[str, str] | None = None,
          cores: int = 1, cost_us: float | None = 100.0) -> FollowerView:  # fmt: skip
    info = FollowerInfo(follower_id=fid, incarnation="i" * 8, host="h", cpu_model="c", cpu_count=2, memory_mb=1,
                        gpus=[], backends=["onnxruntime"], version="1", labels=labels or {}, generator_cores=cores,
                        cpu_per_request_us=cost_us)  # fmt: skip
    now = datetime.now(UTC)
    return FollowerView(info=info, state=state, last_seen=now, registered_at=now,  # type: ignore[arg-type]
                        held=[HeldJob(job_id=f"j{k}", attempt=1, estimate_s=1.0) for k in range(held)])  # fmt: skip


def _spec(rate: float, shards: Any, **extra: Any) -> JobSpec:
    return JobSpec.model_validate({"name": "s", "model": "m", "load": {"rate": rate},
                                   "target": {"url": "http://h:1", "protocol": "kserve-http", "shards": shards}, **extra})


def test_distinct_live_labelled_followers_least_busy_first() -> None:
    views = [_view("a", held=2), _view("b"), _view("c", state="missing"), _view("d", state="draining"),
             _view("e", labels={"zone": "x"}), _view("f", held=1, labels={"zone": "x"})]  # fmt: skip
    spec = _spec(100, 2)
    assert choose_shard_followers(views, spec, expand(spec)) == ["b", "e"]
    zoned = _spec(100, {"count": 2, "labels": {"zone": "x"}})
    assert choose_shard_followers(views, zoned, expand(zoned)) == ["e", "f"]
    with pytest.raises(InvalidSpec, match=r"3 shards need 3 live followers labelled zone=x; the fleet has 2 \(e, f\)"):
        spec3 = _spec(100, {"count": 3, "labels": {"zone": "x"}})
        choose_shard_followers(views, spec3, expand(spec3))


def test_a_rate_the_shards_cannot_drive_is_refused_with_the_figures() -> None:
    views = [_view("a"), _view("b")]
    spec = _spec(30_000, 2)  # 15,000 req/s each at 100 us = 1.5 cores, one each
    with pytest.raises(InvalidSpec, match=r"15000 req/s each.*1\.50 generator cores.*at least 3 shards") as info:
        choose_shard_followers(views, spec, expand(spec))
    assert info.value.field == "target.shards.count"


def test_auto_sizes_the_count_from_the_generator_cost() -> None:
    views = [_view(f"f{k}") for k in range(4)]
    spec = sized(views, _spec(12_000, "auto"), expand(_spec(12_000, "auto")))
    assert spec.target is not None and spec.target.shards.count == 3  # 1.2 cores of work at 50% of one core each
    small = sized(views, _spec(1_000, "auto"), expand(_spec(1_000, "auto")))
    assert small.target is not None and small.target.shards.count == 1
    with pytest.raises(InvalidSpec, match="shards: auto is 5.*the fleet has 4"):
        sized(views, _spec(25_000, "auto"), expand(_spec(25_000, "auto")))
