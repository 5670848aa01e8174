"""A sharded point's pieces on the follower: the shares are a partition of the schedule (each of a Poisson stream
Poisson at its share of the rate, each request keeping its body), and records that travel through the leader come
back and merge into exactly the concatenation of the shards' requests."""

from __future__ import annotations

import numpy as np

from common.spec import PointSpec
from follower.host.sampler import SamplerConfig
from follower.loadgen.records import LoadRecords, decode_records, encode_records, shifted
from follower.loadgen.scaleout import merge
from follower.loadgen.schedule import point_offsets_ns
from follower.point.plan import PointPlan
from follower.point.shard import assignment, share, start_lag_ns


def _plan(rate: float = 2000.0, seconds: float = 20.0) -> PointPlan:
    point = PointSpec(index=0, backend="endpoint", batch_size=1, pattern="poisson", rate=rate, duration_s=seconds,
                      warmup_s=0.0, seed=11)  # fmt: skip
    offsets = point_offsets_ns(point, seconds, point.seed)
    return PointPlan(point=point, bodies=[b"a", b"b", b"c"], body_index=None, offsets_ns=offsets, warmup_ns=0,
                     duration_ns=int(seconds * 1e9), max_s=seconds, window_ns=1_000_000_000, closed=False,
                     sampling=SamplerConfig(), generator_cores=frozenset({1}), generator_plan=None, reasons=(), cap=400,
                     follow_load=False, drain_s=1.0)  # fmt: skip


def test_shares_partition_the_schedule_and_stay_poisson() -> None:
    plan, n = _plan(), 4
    assert np.array_equal(assignment(plan, n), assignment(plan, n))  # every shard draws alike
    shares = [share(plan, k, n) for k in range(n)]
    together = np.sort(np.concatenate([s.offsets_ns for s in shares]))
    assert np.array_equal(together, plan.offsets_ns)  # disjoint, and nothing left out
    for s in shares:
        assert s.point.rate == plan.point.rate / n and s.cap == plan.cap // n
        gaps = np.diff(s.offsets_ns) / 1e9
        # Exponential gaps at rate / n: mean 1 / (rate / n), coefficient of variation 1 (10,000 arrivals each).
        assert abs(gaps.mean() * plan.point.rate / n - 1) < 0.05
        assert abs(gaps.std() / gaps.mean() - 1) < 0.05
    # Each request sends the body it has in the full schedule.
    full = np.arange(len(plan.offsets_ns)) % 3
    mine = assignment(plan, n) == 2
    assert shares[2].body_index is not None and np.array_equal(shares[2].body_index, full[mine])


def _ran(offsets: np.ndarray, start_ns: int, latency_ns: int, lag_ns: int) -> LoadRecords:
    records = LoadRecords.allocate(start_ns, offsets)
    records.sent_ns = records.intended_ns + lag_ns
    records.first_byte_ns = records.sent_ns + latency_ns
    records.done_ns = records.first_byte_ns + 1000
    records.status[:] = 200
    return records


def test_records_through_the_leader_merge_into_the_concatenation() -> None:
    plan = _plan(rate=500.0, seconds=4.0)
    a_offsets, b_offsets = share(plan, 0, 2).offsets_ns, share(plan, 1, 2).offsets_ns
    ours = _ran(a_offsets, start_ns=10_000_000_000, latency_ns=300_000, lag_ns=20_000)
    # The other shard's host has its own monotonic clock: its start is another number for the same instant.
    theirs = decode_records(encode_records(_ran(b_offsets, start_ns=987_000_000_000, latency_ns=700_000, lag_ns=50_000)),
                            cpu_s=0.2, wall_s=4.0)  # fmt: skip
    merged = merge([ours, shifted(theirs, ours.start_ns - theirs.start_ns)], ours.start_ns)
    assert np.array_equal(merged.intended_ns - merged.start_ns, plan.offsets_ns)  # the full schedule, in order
    latencies = np.sort(merged.done_ns - merged.intended_ns)
    expected = np.sort(np.concatenate([ours.done_ns - ours.intended_ns, theirs.done_ns - theirs.intended_ns]))
    assert np.array_equal(latencies, expected)
    assert merged.cpu_s == 0.2 and start_lag_ns(theirs) == 50_000
