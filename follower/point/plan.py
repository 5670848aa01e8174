"""A point's plan, made before any request is sent: the bodies, the schedule (warm-up then measured), the sampling,
the generator processes, and what is already known to break a rule."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from common.formats.traces import Trace
from common.spec.grid import drain_bound_s
from common.spec.job import PointSpec
from common.wire.results import GeneratorPlan, Reason
from follower.host.cpuplan import plan_cpus
from follower.host.sampler import SamplerConfig
from follower.loadgen.bodies import build_bodies, build_row_bodies
from follower.loadgen.llmprompts import llm_bodies, trace_rows
from follower.loadgen.scaleout import COST, plan_generators
from follower.loadgen.schedule import point_offsets_ns
from follower.loadgen.sessions import SessionPlan, session_bodies, trace_scripts
from follower.loadgen.timing import Timer
from follower.point.context import PointContext

# Bodies a closed loop of language-model requests cycles through: distinct prompts (a prefix cache sees no more repeats
# than the workload has) for runs of thousands of requests, built in about a second.
CLOSED_LLM_BODIES = 2048


@dataclass(frozen=True)
class PointPlan:
    """How one point will be driven; `point` is the spec with a replayed trace's nominal rate filled in."""

    point: PointSpec
    bodies: list[bytes]
    body_index: np.ndarray | None  # request i sends bodies[body_index[i]] (a trace's rows), else bodies[i % n]
    offsets_ns: np.ndarray  # warm-up then measured, from the run's start; empty for a closed loop
    warmup_ns: int
    duration_ns: int
    max_s: float  # the schedule's length: the duration, or a stability rule's cap
    window_ns: int
    closed: bool
    sampling: SamplerConfig
    generator_cores: frozenset[int] | None
    generator_plan: GeneratorPlan | None  # open loop: how many generator processes and why (None: closed loop)
    reasons: tuple[Reason, ...]  # rules the plan already breaks
    cap: int  # in-flight cap to start with: the spec's, or (following the load) the follower's bound
    follow_load: bool  # the cap follows the load once warm-up has shown the latency (no cap in the spec)
    drain_s: float  # after the schedule, how long answers still outstanding are awaited (common.spec.grid.drain_bound_s)
    asked_tokens: np.ndarray | None = None  # a language model's point: the output tokens each request asks for
    prompt_tokens: np.ndarray | None = None  # ... and the tokens each request's prompt holds
    sessions: SessionPlan | None = None  # llm.sessions: each session's arrival, steps and pauses (closed is then True)
    timer: Timer = "yield"  # when requests leave (follower/loadgen/timing.py): "busy" where asked and a core is given

    @property
    def processes(self) -> int:
        """Generator processes the point runs with."""
        return 1 if self.generator_plan is None else self.generator_plan.processes


def plan_point(point: PointSpec, ctx: PointContext) -> PointPlan:
    """The plan of `point` under `ctx`; ValueError when the point needs data the job did not fetch."""
    replay: Trace | None = None
    if point.trace_dataset is not None:
        if ctx.run.trace is None or point.pattern != "trace":
            raise ValueError(f"point {point.index} replays trace {point.trace_dataset}, which was not fetched")
        replay = ctx.run.trace
        # The nominal rate of an uploaded trace is known only here: the entries (a session trace's sessions) inside
        # the run over its duration.
        inside = replay.within(point.duration_s)
        arrivals = inside.sessions if replay.session_of is not None else len(inside)
        point = point.model_copy(update={"rate": max(arrivals, 1) / point.duration_s})
    model, protocol = ctx.run.model, ctx.endpoint.protocol
    bodies = []
    if point.llm is None:
        bodies = build_bodies(model.inputs, point.batch_size, seed=point.seed, protocol=protocol, samples=ctx.run.samples)
    # One continuous schedule covers warm-up and measurement: the measured window starts with the server already
    # in steady state under this very load (queues, connections, caches), with no idle gap between the two.
    warmup_ns, duration_ns = int(round(point.warmup_s * 1e9)), int(round(point.duration_s * 1e9))
    # With a stability rule the schedule runs to its cap and the window monitor ends it once the windows agree.
    max_s = max(point.duration_s, point.stability.max_duration) if point.stability else point.duration_s
    closed = point.pattern == "closed"
    offsets = np.zeros(0, dtype=np.int64)
    body_index: np.ndarray | None = None
    replayed: Trace | None = None
    if replay is not None:
        replayed = trace_schedule(replay, point.warmup_s, max_s)
        offsets, rows = replayed.offsets_ns, replayed.inputs
        if rows is not None and point.llm is None:
            if ctx.run.samples is None:
                raise ValueError(f"trace {point.trace_dataset} names request-data rows but the job has no uploaded data")
            bodies, body_index = build_row_bodies(model.inputs, point.batch_size, ctx.run.samples, rows, protocol=protocol)
    elif not closed:
        offsets = point_offsets_ns(point, max_s, point.seed) + warmup_ns
        if warmup_ns > 0:
            # Warm-up has its own stream (seed + 2**32, never a point's seed) so the measured window keeps its exact count.
            warm = point_offsets_ns(point, point.warmup_s, point.seed + 2**32)
            offsets = np.concatenate([warm, offsets])
    asked = held = None
    sessions: SessionPlan | None = None
    if point.llm is not None:
        # A language model: one body per request, its prompt and output lengths drawn per request.
        if ctx.prompts is None:
            raise ValueError(f"point {point.index} is a language model's: it needs the model's tokenizer")
        # A closed loop has no schedule: its users cycle through a pool of bodies (each request's lengths follow it).
        count = CLOSED_LLM_BODIES if closed else len(offsets)
        workload, prompt_rows = point.llm, ctx.run.prompt_rows
        from_trace = workload.sessions is not None and workload.sessions.from_trace
        if (replayed is not None and replayed.session_of is not None) != from_trace:
            raise ValueError(f"trace {point.trace_dataset} holds sessions exactly when llm.sessions.from_trace replays them")
        if replayed is not None and replayed.prompt_tokens is not None and not from_trace:
            if workload.sessions is not None:
                raise ValueError(f"trace {point.trace_dataset} gives each request's lengths; sessions draw their own turns")
            # A trace that gives each request's lengths: request i takes entry i's.
            prompt_rows = trace_rows(replayed, point.trace_block_tokens)
            workload = workload.model_copy(update={"order": "sequential"})
        # A token count in every event where the server takes the ask: an event carrying several tokens is split.
        workload = workload.model_copy(update={"usage_per_event": workload.asks_usage_per_event(point.backend)})
        if workload.sessions is not None:
            # Sessions: each offset starts one; its turns are due as the answers come (no schedule of requests). A
            # session trace's entries are its sessions' turns, each at its session's offset.
            scripts, starts = None, offsets
            if replayed is not None and replayed.session_of is not None:
                scripts = trace_scripts(replayed)
                starts = offsets[np.searchsorted(replayed.session_of, np.arange(replayed.sessions))]
            built = session_bodies(workload, model.name, ctx.prompts, starts, point.seed, warmup_ns + duration_ns, scripts)
            bodies, held, asked, sessions = built.bodies, built.held, built.asked, built.plan
            offsets, closed = np.zeros(0, dtype=np.int64), True
        else:
            bodies, body_index, held, asked = llm_bodies(workload, model.name, ctx.prompts, count, point.seed, prompt_rows)
        if closed:
            body_index = None
        room = point.server.llm.model_len(model.llm.context_length) if model.llm is not None else None
        per_input = workload.pooled  # each text is its own sequence: the longest drawn must fit
        if room is not None and per_input and workload.prompt_tokens.upper > room:
            raise ValueError(f"texts of up to {workload.prompt_tokens.upper} tokens exceed the {room} a sequence may hold")
        if room is not None and not per_input and len(held) and int((held + asked).max()) > room:
            worst = int(np.argmax(held + asked))
            raise ValueError(
                f"a request of {int(held[worst])} prompt tokens and {int(asked[worst])} output tokens "
                f"exceeds the {room} tokens a sequence may hold on the server (server.llm.max_model_len)"
            )
    sampling = ctx.run.sampling
    if sampling.gpu_indices is None:
        # Only the GPU this point's server runs on is its GPU: a CPU-served point on a GPU host gets no GPU figures
        # (the idle card's power is not the energy of its requests), a GPU point gets its own card, not the others.
        sampling = dataclasses.replace(sampling, gpu_indices=(point.server.gpu_index,) if point.server.uses_gpu else ())
    # Scale-out: as many generator processes as the target rate needs at this host's measured CPU per request,
    # up to one per generator core. Several processes cannot feed the live window monitor (it needs all records on
    # one loop): their windows are computed after the run and stability cannot end the run early.
    generator_cores = plan_cpus().generator
    gen_plan = None
    reasons: list[Reason] = []
    if not closed:
        tokens = float(asked.mean()) if asked is not None and len(asked) else 0.0
        cost_s = ctx.cpu_per_request_s or COST.estimate_s  # a target's calibrated cost, else the learned one
        gen_plan = plan_generators(
            point.rate,
            cost_s,
            len(generator_cores or ()),
            ctx.run.forced_generators,
            tokens_per_request=tokens,
            cpu_per_event_s=COST.event_estimate_s,
        )
        if gen_plan.saturated:
            reasons.append(Reason(code="generator_capacity", text=f"load generator {gen_plan.reason}"))
    return PointPlan(
        point=point,
        bodies=bodies,
        body_index=body_index,
        offsets_ns=offsets,
        warmup_ns=warmup_ns,
        duration_ns=duration_ns,
        max_s=max_s,
        window_ns=max(int(round(point.window_s * 1e9)), 1_000_000),
        closed=closed,
        sampling=sampling,
        generator_cores=generator_cores,
        generator_plan=gen_plan,
        reasons=tuple(reasons),
        timer="busy" if point.busy_wait and generator_cores else ctx.run.timer,
        cap=point.max_concurrency or ctx.run.max_in_flight,
        follow_load=point.max_concurrency is None,
        drain_s=drain_bound_s(point.duration_s),
        asked_tokens=asked,
        prompt_tokens=held,
        sessions=sessions,
    )


def trace_schedule(trace: Trace, warmup_s: float, max_s: float) -> Trace:
    """A replayed trace as the run's schedule: its first `warmup_s` as warm-up, then the trace itself, with each
    entry's request-data row and lengths where it gives them.

    The measured part starts at warmup_s, so each measured request's intended time is its trace offset exactly.
    """
    return trace.within(warmup_s).then(trace.within(max_s), int(round(warmup_s * 1e9)))
