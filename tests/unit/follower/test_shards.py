"""A sharded point's pieces on the follower: the shares are a partition of the schedule (each of a Poisson stream
Poisson at its share of the rate, each request keeping its body and its asked tokens), and records that travel through
the leader come back and merge into exactly the concatenation of the shards' requests, a language model's token
records and client counts included."""

from __future__ import annotations

import dataclasses
import io

import numpy as np

from benchfleet.generate.llmgen import LlamaSpec, generate
from common.formats import hfbundle
from common.spec.job import PointSpec
from common.spec.llm import LlmWorkload
from follower.host.sampler import SamplerConfig
from follower.loadgen.llmprompts import PromptMaker
from follower.loadgen.llmrecords import LlmColumns
from follower.loadgen.llmstats import llm_figures
from follower.loadgen.records import LoadRecords, decode_records, encode_records, shifted
from follower.loadgen.scaleout import merge
from follower.loadgen.schedule import point_offsets_ns
from follower.point.plan import PointPlan
from follower.point.shard import assignment, share, start_lag_ns
from follower.protocols.transports.base import Stream


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


def test_a_language_models_records_merge_into_the_figures_of_the_whole_run() -> None:
    """Two shards of an LLM point: shard 1's token records travel as a blob (arrivals on its own clock, its client
    counts in place of its texts); merged with shard 0's, every figure equals that of the same requests run whole."""
    data, _ = generate(LlamaSpec(layers=1, hidden=64, heads=2, kv_heads=2, intermediate=128, vocab=2048, context=512))
    maker = PromptMaker(*hfbundle.tokenizer_files(io.BytesIO(data), limit_bytes=10**8))
    rng = np.random.default_rng(3)
    base = _plan(rate=100.0, seconds=4.0)
    n = len(base.offsets_ns)
    asked_tokens, prompt_tokens = rng.integers(2, 9, n), rng.integers(5, 40, n)
    plan = dataclasses.replace(base, asked_tokens=asked_tokens, prompt_tokens=prompt_tokens)
    whole = _ran(plan.offsets_ns, start_ns=10_000_000_000, latency_ns=0, lag_ns=30_000)
    whole.llm = LlmColumns.allocate(n)
    for i in range(n):
        k, gap = int(asked_tokens[i]), int(rng.integers(1, 4)) * 1_000_000
        events = [int(whole.sent_ns[i]) + 5_000_000 + j * gap for j in range(k)]
        whole.first_byte_ns[i], whole.done_ns[i] = events[0], events[-1] + 500_000
        words = b"".join(rng.choice([b" the", b" sky", b"!", b" 42", b" blue"], size=k))
        whole.llm.add(i, Stream(events, words, int(prompt_tokens[i]), k, events=k + 1))
    mine = assignment(plan, 2)
    assert np.array_equal(share(plan, 1, 2).asked_tokens, asked_tokens[mine == 1])  # type: ignore[arg-type]
    ours = _cut(whole, mine == 0)
    theirs = shifted(_cut(whole, mine == 1), 777_000_000_000)  # another host's clock
    assert theirs.llm is not None and ours.llm is not None
    blob = encode_records(theirs, theirs.llm.client_counts(maker))
    back = decode_records(blob, cpu_s=0.1, wall_s=4.0)
    assert back.llm is not None and all(t is None for t in back.llm.texts)  # the texts stayed on their shard
    merged = merge([ours, shifted(back, ours.start_ns - back.start_ns)], ours.start_ns)
    workload = LlmWorkload.model_validate({"prompt_tokens": 20, "output_tokens": 5})
    expected = llm_figures(whole, 4.0, (prompt_tokens, asked_tokens), workload, None, maker)
    got = llm_figures(merged, 4.0, (prompt_tokens, asked_tokens), workload, None, maker)
    assert expected is not None and got is not None
    assert got.figures == expected.figures and expected.figures.output_tokens_client > 0
    assert expected.figures.ttft_ms is not None and expected.figures.ttft_ms.count == n


def _cut(records: LoadRecords, mask: np.ndarray) -> LoadRecords:
    """The requests of `records` where `mask` is set (a shard's own), on the same clock."""
    assert records.llm is not None
    return dataclasses.replace(
        records, intended_ns=records.intended_ns[mask], sent_ns=records.sent_ns[mask],
        first_byte_ns=records.first_byte_ns[mask], done_ns=records.done_ns[mask], status=records.status[mask],
        capped=records.capped[mask], stages_ns={k: v[mask] for k, v in records.stages_ns.items()},
        llm=records.llm.subset(mask),
    )  # fmt: skip
