"""Pinning is placement's: a fleet check's job and each shard of a sharded job get their follower through one
function, and the store persists the plan as placement left it."""

from __future__ import annotations

import pytest

from common.spec.parse import parse_spec
from leader.jobplan import plan_job
from leader.placement.pins import pin_shards, pinned


def test_a_pinned_spec_runs_on_its_follower_alone_and_keeps_its_other_needs() -> None:
    spec = parse_spec({"name": "j", "model": "m:1", "load": {"rate": 10}, "requires": {"labels": {"zone": "a"}}})
    pin = pinned(spec, "f1")
    assert pin.requires.follower == "f1" and pin.requires.labels == {"zone": "a"}
    assert spec.requires.follower is None  # the original is not changed


def test_each_shard_is_pinned_to_its_follower_in_order() -> None:
    target = {"url": "http://h:1", "protocol": "kserve-http", "shards": 3}
    plan = plan_job(parse_spec({"name": "s", "model": "m:1", "load": {"rate": 30}, "target": target}))
    assert plan.sharded and len(plan.parts) == 3
    pinned_plan = pin_shards(plan, ["a", "b", "c"])
    assert [p.spec.requires.follower for p in pinned_plan.parts if p.spec] == ["a", "b", "c"]
    with pytest.raises(ValueError, match="needs as many followers"):
        pin_shards(plan, ["a", "b"])
