"""A sharded point on one follower (target.shards): its own share of the arrivals, from the instant every shard
starts at, and on the coordinator (shard 0) the merge of every shard's records into the point.

The share is independent thinning: every shard draws, with the point's seed, one shard number per arrival of the
point's full schedule and keeps the arrivals drawn for it. The shares are disjoint, their union is the schedule, and
a Poisson stream's shares are Poisson at rate / count. The start is the leader's barrier: each shard says it is
ready, and once all are the leader names one instant on its own clock; each follower converts it through its clock
offset to the leader (the fastest of several round trips; half that round trip is the offset's uncertainty).

The coordinator merges exactly: every shard's records, moved onto its own clock by the difference of the shards'
starts, concatenated and sorted by intended time (follower.loadgen.scaleout.merge, as for generator processes on one
host), and judged as one point against the full schedule. A language model's records merge the same way, token
arrivals moved with them; each shard counts its own texts with the model's tokenizer and sends the counts. A shard
whose records never come (its follower died, its network went) contributes its share as requests never sent, and
the point is invalid naming that shard: never a silently lower rate.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from typing import Literal

import numpy as np

from common.wire.results import Reason, ShardRun
from common.wire.shards import BarrierAnswer, ShardFigures
from follower.loadgen.records import LoadRecords, decode_records, encode_records, shifted
from follower.loadgen.scaleout import COST, merge, plan_generators
from follower.point.context import PointContext, ShardLink
from follower.point.drive import Driven, drive_point, unsent
from follower.point.plan import PointPlan

log = logging.getLogger(__name__)

THIN_SALT = 0x53484152  # the thinning stream's own seed word, so it never repeats the schedule's draws
POLL_S = 0.05  # the barrier's start lies START_LEAD_NS (leader/store/shard_points.py) ahead of its release
# A shard's records reach the coordinator within its drain bound of the schedule's end; past this more, it is lost.
GATHER_GRACE_S = 60.0
SKEW_LIMIT_MS = 1.0  # a merged point whose shards started further apart (or whose offsets are less sure) is flagged
START_SENDS = 10
OFFSET_BUDGET_S = 0.2  # the most the clock offset's round trips may take past their first 16


def assignment(plan: PointPlan, count: int) -> np.ndarray:
    """The shard each arrival of the full schedule goes to (the same on every shard)."""
    rng = np.random.default_rng([plan.point.seed, THIN_SALT])
    return rng.integers(0, count, size=len(plan.offsets_ns))


def share(plan: PointPlan, shard: int, count: int, cpu_per_request_s: float | None = None) -> PointPlan:
    """Shard `shard`'s plan: its arrivals (with the bodies they send and, for a language model, the tokens each
    asks for), its share of the rate, the in-flight cap and one generator's verdict on carrying it."""
    mine = assignment(plan, count) == shard
    bodies = max(len(plan.bodies), 1)
    body_index = plan.body_index if plan.body_index is not None else np.arange(len(plan.offsets_ns)) % bodies
    p = plan.point
    point = p.model_copy(
        update={
            "rate": p.rate / count,
            "rate_end": p.rate_end / count if p.rate_end else None,
            "spike_rate": p.spike_rate / count if p.spike_rate else None,
        }
    )
    asked = plan.asked_tokens[mine] if plan.asked_tokens is not None else None
    tokens = float(asked.mean()) if asked is not None and len(asked) else 0.0
    gen = plan_generators(
        point.rate,
        cpu_per_request_s or COST.estimate_s,
        len(plan.generator_cores or ()),
        tokens_per_request=tokens,
        cpu_per_event_s=COST.event_estimate_s,
    )
    reasons = [r for r in plan.reasons if r.code != "generator_capacity"]
    if gen.saturated:
        reasons.append(Reason(code="generator_capacity", text=f"load generator of shard {shard}: {gen.reason}"))
    return dataclasses.replace(
        plan,
        point=point,
        offsets_ns=plan.offsets_ns[mine],
        body_index=body_index[mine],
        reasons=tuple(reasons),
        generator_plan=gen.model_copy(update={"processes": 1}),
        cap=max(1, plan.cap // count),
        asked_tokens=asked,
        prompt_tokens=plan.prompt_tokens[mine] if plan.prompt_tokens is not None else None,
    )


def start_lag_ns(records: LoadRecords) -> int | None:
    """How late the run's schedule began against the common start: the median send lag of its first START_SENDS
    sent requests (one request alone would carry its connection's setup)."""
    sent = np.flatnonzero(records.sent_ns >= 0)[:START_SENDS]
    return int(np.median(records.sent_ns[sent] - records.intended_ns[sent])) if len(sent) else None


async def drive_shard(plan: PointPlan, ctx: PointContext) -> tuple[Driven, PointPlan]:
    """Drive this follower's share of the point from the common start; (what was driven, the plan to judge it by):
    a shard's own share, or on the coordinator every shard's records merged, judged against the full schedule."""
    link = ctx.run.shard
    assert link is not None
    mine = share(plan, link.index, link.count, ctx.cpu_per_request_s)
    index = plan.point.index
    answer = await _barrier(link, index)
    if answer.state == "skip" or answer.start_at_ns is None:
        why = f"shard {link.index} of {link.count} was not ready when point {index} started; its share went unsent"
        return Driven(unsent(mine.offsets_ns, why), [Reason(code="shard_absent", text=why)]), mine
    # Measured now, in the start's lead time: every shard has stopped polling, so the leader answers at once. Sure to a
    # quarter of the limit if a fast round trip comes within OFFSET_BUDGET_S (of the 0.5 s lead, START_LEAD_NS).
    enough_ns = int(SKEW_LIMIT_MS * 1e6 / 4)
    offset_ns, uncertainty_ns = await asyncio.to_thread(link.client.clock_offset, 16, enough_ns, OFFSET_BUDGET_S)
    # The leader's instant on this host's monotonic clock: its wall-clock image, then the wall → monotonic step now.
    start_ns = time.monotonic_ns() + (answer.start_at_ns - offset_ns - time.time_ns())
    driven = await drive_point(mine, ctx, start_ns=start_ns)
    lag_ns = start_lag_ns(driven.records)
    own = ShardRun(
        shard=link.index,
        follower_id=link.follower_id,
        state="merged",
        requests=len(driven.records),
        offset_ms=offset_ns / 1e6,
        offset_uncertainty_ms=uncertainty_ns / 1e6,
        start_lag_ms=_ms(lag_ns),
    )
    # Every shard's own records go to the leader: the coordinator merges the others', and anyone may check the merge.
    figures = ShardFigures(
        cpu_s=driven.records.cpu_s,
        wall_s=driven.records.wall_s,
        offset_ns=offset_ns,
        uncertainty_ns=uncertainty_ns,
        start_lag_ns=lag_ns or 0,
        requests=len(driven.records),
    )
    # A language model's texts stay here: the client's token count of each travels instead (the same tokenizer).
    llm = driven.records.llm
    counted = await asyncio.to_thread(llm.client_counts, ctx.prompts) if llm is not None else None
    blob = encode_records(driven.records, counted)
    await asyncio.to_thread(
        link.client.put_shard_records, link.job_id, link.index, index, link.attempt, link.follower_id, blob, figures
    )
    if link.index > 0:  # reported as this shard's part's own point (its share); the job's point is the coordinator's
        return driven, mine
    merged, runs, reasons = await _gather(link, plan, driven.records, own)
    lags = [r.start_lag_ms for r in runs if r.state == "merged" and r.start_lag_ms is not None]
    skew = round(max(lags) - min(lags), 4) if len(lags) > 1 else None
    unsure = max((r.offset_uncertainty_ms or 0.0 for r in runs if r.state == "merged"), default=0.0)
    if (skew is not None and skew > SKEW_LIMIT_MS) or unsure > SKEW_LIMIT_MS:
        text = (
            f"the shards' starts spread {skew or 0:.3f} ms, their clock offsets are known to {unsure:.3f} ms: "
            f"over the {SKEW_LIMIT_MS:g} ms a merged point allows"
        )
        reasons.append(Reason(code="shard_skew", text=text))
    wire = driven.wire  # the coordinator's own connections: each shard captures only its own host's
    if wire is not None and wire.ran:
        wire = wire.model_copy(update={"scope": f"shard 0's share of {link.count} (each follower sees its own connections)"})
    driven = dataclasses.replace(
        driven, records=merged, reasons=driven.reasons + reasons, shards=runs, shard_skew_ms=skew, wire=wire
    )
    # Judged as one point against the full schedule, by one shard's generator plan (each carried its share).
    return driven, dataclasses.replace(plan, generator_plan=mine.generator_plan, reasons=mine.reasons)


def _ms(ns: int | float | None) -> float | None:
    return None if ns is None else round(ns / 1e6, 4)


async def _barrier(link: ShardLink, index: int) -> BarrierAnswer:
    """Say this shard is ready for the point, and wait for the leader's go (or skip)."""
    while True:
        ready = link.client.shard_ready
        answer = await asyncio.to_thread(ready, link.job_id, link.index, index, link.attempt, link.follower_id)
        if answer.state != "waiting":
            return answer
        await asyncio.sleep(POLL_S)


async def _gather(
    link: ShardLink, plan: PointPlan, own: LoadRecords, own_run: ShardRun
) -> tuple[LoadRecords, list[ShardRun], list[Reason]]:
    """Every shard's records of the point on the coordinator's clock, merged; each shard's run; the reasons the
    point is invalid (a shard lost or absent)."""
    index = plan.point.index
    deadline = time.monotonic() + plan.drain_s + GATHER_GRACE_S
    while True:
        status = await asyncio.to_thread(link.client.shard_status, link.job_id, index, link.attempt, link.follower_id)
        others = [s for s in status.shards if s.shard != link.index]
        if all(s.state != "waiting" for s in others) or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.1)
    assign = assignment(plan, link.count)
    parts, runs, reasons = [own], [own_run], []
    for s in others:
        k, follower = s.shard, s.follower_id
        if s.state == "uploaded":
            figures = s.figures or ShardFigures()
            blob = await asyncio.to_thread(link.client.shard_records, link.job_id, k, index, link.attempt, link.follower_id)
            theirs = decode_records(blob, cpu_s=figures.cpu_s, wall_s=figures.wall_s)
            # Both started at the leader's one instant: their start is ours on this clock.
            parts.append(shifted(theirs, own.start_ns - theirs.start_ns))
            runs.append(
                ShardRun(
                    shard=k,
                    follower_id=follower,
                    state="merged",
                    requests=len(theirs),
                    offset_ms=_ms(figures.offset_ns),
                    offset_uncertainty_ms=_ms(figures.uncertainty_ns),
                    start_lag_ms=_ms(figures.start_lag_ns),
                )
            )
            continue
        state: Literal["lost", "absent"] = "absent" if s.state == "absent" else "lost"
        why = s.reason or f"no records within {plan.drain_s + GATHER_GRACE_S:g} s of the point's end"
        what = "lost mid-point" if state == "lost" else "absent at the start"
        text = f"shard {k} of {link.count} (follower {follower or 'none'}) {what}: {why}"
        reasons.append(Reason(code="shard_lost" if state == "lost" else "shard_absent", text=text))
        # Its share counts as never sent: the point keeps its full schedule and says who is missing.
        missing = LoadRecords.allocate(own.start_ns, plan.offsets_ns[assign == k])
        missing.error_sample = text
        parts.append(missing)
        runs.append(ShardRun(shard=k, follower_id=follower, state=state, requests=len(missing), reason=why))
        log.warning("point %d: %s", index, text)
    return merge(parts, own.start_ns), sorted(runs, key=lambda r: r.shard), reasons
