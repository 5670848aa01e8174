"""A judged point as the PointResult the follower reports."""

from __future__ import annotations

import hashlib
import platform
from datetime import datetime

import numpy as np

import common
from common.spec.job import PointSpec
from common.wire.repro import config_hash
from common.wire.results import ColdStart, Environment, LlmFigures, PointResult
from follower.loadgen.records import LoadRecords
from follower.loadgen.verdict import slo_met
from follower.point.context import HostFacts, PointContext, ServerRun
from follower.point.drive import Driven
from follower.point.judge import Judgement
from follower.point.plan import PointPlan


def point_result(
    plan: PointPlan, driven: Driven, judged: Judgement, ctx: PointContext, *, started_at: datetime, cold_start: ColdStart | None
) -> PointResult:
    """Everything the point measured, its verdict and the environment it ran in."""
    summary, records, point = judged.summary, driven.records, plan.point
    return PointResult(
        point=point,
        started_at=started_at,
        measured_s=judged.measured_ns / 1e9,
        requests=summary.requests,
        ok=summary.ok,
        errors=summary.errors,
        error_sample=summary.error_sample,
        offered_rate=summary.offered_rate,
        achieved_rate=summary.achieved_rate,
        latency_ms=summary.latency_ms,
        service_ms=summary.service_ms,
        send_lag_ms=summary.send_lag_ms,
        cold_start=cold_start,
        conversion=ctx.conversion,
        valid=not judged.reasons,
        reasons=judged.reasons,
        slo_met=slo_met(ctx.run.slo, summary.latency_ms, judged.llm),
        environment=environment(
            ctx.run.host_facts, backend_version=ctx.backend_version, seed=point.seed, run_hash=run_hash(point, ctx)
        ),
        generator_cpu_share=summary.cpu_share,
        loop_lag_ms=summary.loop_lag_ms,
        latency_ci_ms=summary.latency_ci_ms,
        latency_hdr=summary.latency_hdr,
        service_hdr=summary.service_hdr,
        stages_ms=summary.stage_means_ms if judged.llm is None else llm_stages(judged.llm),
        capped=summary.capped,
        dropped=summary.dropped,
        windows=judged.windows,
        stable=judged.stable,
        resources=judged.resources,
        server_stats=driven.server_stats,
        shards=driven.shards,
        shard_skew_ms=driven.shard_skew_ms,
        generators=plan.processes,
        generator_plan=plan.generator_plan,
        generator_scheduling=records.scheduling,
        generator_timer=describe_timer(records, plan) if not plan.closed else None,
        cpu_wakeup_latency=ctx.wakeup.describe() if ctx.wakeup is not None else None,
        host_steal_share=driven.steal,
        generator_run_queue_share=records.run_queue_share,
        in_flight_cap=records.cap if not plan.closed else None,
        llm=judged.llm,
        wire=driven.wire,
    )


def describe_timer(records: LoadRecords, plan: PointPlan) -> str:
    """How the point's requests were timed, in words: the timer, its wake margin, the run's share spent spinning."""
    spun = f"{100 * records.spin_share:.1f}% of the run spinning before sends"
    margin = (records.wake_margin_ns or 0) / 1000
    if records.timer == "busy":
        said = f"busy-wait tail of {margin:g} µs before each send on the generator's own core; {spun}"
    elif records.timer == "thread":
        said = "a timer thread (clock_nanosleep) handing each request to the loop"
    else:
        said = f"timerfd waking {margin:.0f} µs ahead (its recent wake-ups' lateness, 90th percentile); {spun}"
    if plan.point.busy_wait and records.timer != "busy":
        said += "; busy_wait was asked, but this follower has no core to give its generator"
    return said


def llm_stages(figures: LlmFigures) -> dict[str, float] | None:
    """A language model's stage breakdown (ms): the server's own mean queue, prefill and decode time per request (its
    metrics), and `transmission`, what the client's mean time from send to the last byte adds to the server's mean
    end-to-end (network, HTTP and streaming framing, tokenizing and detokenizing outside the engine). The server's means
    cover the whole run (warm-up included), the client's the measured window: close, not identical. None where the
    server exports no such histograms."""
    server = figures.server
    if server is None or figures.e2e_sent_ms is None:
        return None
    parts = {"queue": server.queue_ms_mean, "prefill": server.prefill_ms_mean, "decode": server.decode_ms_mean}
    if any(v is None for v in parts.values()) or server.e2e_ms_mean is None:
        return None
    service = figures.e2e_sent_ms.mean
    if service is None:  # only an imported point's figures lack a mean
        return None
    return {
        **{k: float(v) for k, v in parts.items() if v is not None},
        "transmission": service - server.e2e_ms_mean,
        "service": service,
    }


def data_checksum(run: ServerRun) -> str | None:
    """sha256 of the request data the points send (the samples by input, a prompt set's rows, a trace); None: none
    uploaded (synthetic data, drawn from the point's seed)."""
    digest, used = hashlib.sha256(), False
    for name in sorted(run.samples or {}):
        array = np.ascontiguousarray(np.asarray((run.samples or {})[name]))
        digest.update(f"{name}|{array.dtype}|{array.shape}|".encode())
        digest.update(array.tobytes())
        used = True
    if run.prompt_rows:
        digest.update(repr(run.prompt_rows).encode())
        used = True
    if run.trace is not None:
        for part in (run.trace.offsets_ns, run.trace.inputs, run.trace.prompt_tokens, run.trace.output_tokens):
            digest.update(b"|" if part is None else np.ascontiguousarray(part).tobytes())
        used = True
    return digest.hexdigest() if used else None


def run_hash(point: PointSpec, ctx: PointContext) -> str:
    """The point's configuration hash (common/wire/repro.py): its spec, the model's and the data's checksums, benchfleet's
    version."""
    return config_hash(
        point, model_sha256=ctx.run.model.sha256, data_sha256=data_checksum(ctx.run), benchfleet=common.__version__
    )


def environment(facts: HostFacts, *, backend_version: str, seed: int, run_hash: str | None = None) -> Environment:
    """The Environment of a point: the host facts the agent knows plus versions, the seed and the configuration hash."""
    base = Environment(
        follower_id=facts.follower_id,
        host=facts.host,
        cpu_model=facts.cpu_model,
        cpu_count=facts.cpu_count,
        gpus=list(facts.gpus),
        python=platform.python_version(),
        benchfleet=common.__version__,
        backend_version=backend_version,
        seed=seed,
        config_hash=run_hash,
    )
    return base if facts.platform is None else base.model_copy(update=dict(facts.platform))
