"""A job's grid: its points (backends × batch sizes × rates, in a stable order) and its first run-time estimate."""

from __future__ import annotations

from collections.abc import Sequence

from common.spec import colocate
from common.spec.job import LLM_BACKENDS, JobSpec, PointSpec
from common.spec.llm import LlmWorkload
from common.spec.load import DEFAULT_BLOCK_TOKENS, TraceRef
from common.spec.server import ServerOptions
from common.spec.sweep import configurations

# What starting one backend's server costs a job before its first point (start, load, first answer), in seconds:
# the part of an estimate that does not scale with the points.
START_COST_S = 5.0
# After its last request is due, a point waits for the answers still outstanding at most its measured duration
# (at least DRAIN_MIN_S, at most DRAIN_MAX_S, the request timeout): a server that keeps up answers within its latency,
# and one that fell behind gets as long to clear its backlog as it had to build it (all of it at up to twice its
# capacity). What is unanswered then is recorded as such and invalidates the point; nothing waits longer.
DRAIN_MIN_S = 2.0
DRAIN_MAX_S = 30.0


def drain_bound_s(duration_s: float) -> float:
    """How long a point of this measured duration waits, after its schedule, for answers still outstanding."""
    return min(DRAIN_MAX_S, max(DRAIN_MIN_S, duration_s))


def _workload(spec: JobSpec, backend: str) -> LlmWorkload | None:
    """A point's language-model requests: the spec's, or the default ones for an LLM backend or an OpenAI-compatible
    target; None otherwise."""
    if backend not in LLM_BACKENDS and not (spec.target is not None and spec.target.is_llm):
        return None
    return spec.llm or LlmWorkload()


def _served(spec: JobSpec) -> ServerOptions:
    """The job's server options, with the processors that run server-side when `data.processing` is server."""
    server = spec.server
    if spec.llm is not None and spec.llm.pooled and server.llm.runner is None:  # vLLM embeds and scores as a pooling model
        server = server.model_copy(update={"llm": server.llm.model_copy(update={"runner": "pooling"})})
    if spec.data.processing != "server":
        return server
    return server.model_copy(update={"preprocess": spec.data.preprocess, "postprocess": spec.data.postprocess})


# The load settings every point carries as they are: PointSpec field ← LoadSpec field. The other LoadSpec fields are
# resolved per point (PER_POINT). A point is the resolved, stored form the follower reads (seconds as `_s` floats,
# one rate); tests/unit/common/test_grid.py holds that every LoadSpec field is one or the other.
POINT_FROM_LOAD = {
    "pattern": "pattern",
    "duration_s": "duration",
    "warmup_s": "warmup",
    "max_concurrency": "max_concurrency",
    "cap_policy": "cap_policy",
    "busy_wait": "busy_wait",
    "cv": "cv",
    "rate_end": "rate_end",
    "steps": "steps",
    "spike_rate": "spike_rate",
    "spike_at_s": "spike_at",
    "spike_duration_s": "spike_duration",
    "on_s": "on",
    "off_s": "off",
    "search": "search",
    "window_s": "window",
    "stability": "stability",
}
# LoadSpec fields a point gets resolved: one rate or user count of the ladder, the inline trace or the uploaded one.
PER_POINT = ("rate", "concurrency", "trace")
# Read at submission only, never by a point: whether a point too short for a p99 may run (leader/jobs/limits.py).
AT_SUBMISSION = ("allow_short",)


def expand(spec: JobSpec) -> list[PointSpec]:
    """Expand the grid backends × batch sizes × rates into points, in a stable order, each configuration run
    `repeats.count` times: the rounds interleave within a backend's server (every configuration once, then again), or
    with `repeats.fresh_server` across backends too (each round starts every backend's server afresh)."""
    load, server = spec.load, _served(spec)
    shared = {point_field: getattr(load, load_field) for point_field, load_field in POINT_FROM_LOAD.items()}
    trace_s = load.trace if isinstance(load.trace, list) else None
    trace_dataset = load.trace.dataset if isinstance(load.trace, TraceRef) else None
    block_tokens = load.trace.block_tokens if isinstance(load.trace, TraceRef) else DEFAULT_BLOCK_TOKENS
    servers = configurations(spec.sweep, server) if spec.sweep else [server]
    configs = [
        (backend, served, batch, rate, concurrency)
        for backend in spec.backends
        for served in servers
        for batch in spec.batch_sizes
        for rate, concurrency in load.ladder()
    ]
    per_server = len(configs) // (len(spec.backends) * len(servers))  # the configurations one server start runs
    rounds = range(spec.repeats.count)
    if spec.repeats.fresh_server:
        order = [(r, c) for r in rounds for c in range(len(configs))]
    else:
        starts = len(configs) // per_server
        order = [(r, s * per_server + k) for s in range(starts) for r in rounds for k in range(per_server)]
    points: list[PointSpec] = []
    for repeat, config in order:
        backend, served, batch, rate, concurrency = configs[config]
        index = len(points)
        points.append(
            PointSpec(
                index=index,
                backend=backend,
                batch_size=batch,
                rate=rate,
                concurrency=concurrency,
                seed=(spec.seed * 1_000_003 + index) % 2**32,
                trace_s=trace_s,
                trace_dataset=trace_dataset,
                trace_block_tokens=block_tokens,
                server=served,
                config=config,
                repeat=repeat,
                llm=_workload(spec, backend),
                audit=spec.audit,
                propagate_trace=spec.propagate_trace,
                **shared,
            )
        )
    if spec.colocate is not None:  # one configuration: every model alone, then each pair at once (common/spec/colocate.py)
        base, n = points[0], len(spec.colocate.models) + 1
        together = [(g, m, [o for o in run if o != m]) for g, run in enumerate(colocate.runs(n)) for m in run]
        points = [
            base.model_copy(
                update={"index": i, "seed": (spec.seed * 1_000_003 + i) % 2**32, "served": m, "beside": beside, "group": g}
            )
            for i, (g, m, beside) in enumerate(together)
        ]
    return points


def server_runs(points: Sequence[PointSpec], fresh_server: bool) -> list[list[PointSpec]]:
    """The points in the runs of consecutive points that share one server start: a backend's points, or with fresh
    servers a backend's points of one round, or a co-location group's points (each against a server of its own, all
    at once), or one server configuration's of a sweep. The follower starts a server per run (per point of a group);
    estimates count a start per run."""
    if points and points[0].group is not None:
        groups: dict[int, list[PointSpec]] = {}
        for point in points:
            groups.setdefault(point.group or 0, []).append(point)
        return list(groups.values())

    def start(point: PointSpec) -> tuple[str, ServerOptions, int]:
        return point.backend, point.server, point.repeat if fresh_server else 0

    runs: list[list[PointSpec]] = []
    for point in points:
        if runs and start(runs[-1][-1]) == start(point):
            runs[-1].append(point)
        else:
            runs.append([point])
    return runs


def _runs_per_point(spec: JobSpec) -> int:
    return spec.load.search.max_steps if spec.load.search is not None else 1  # every search step is a run of its own


def _point_seconds(spec: JobSpec) -> float:
    """One point's warm-up and measured time; a search's every probe, the lowest rate's as long as its p99 needs."""
    load, search = spec.load, spec.load.search
    if search is None:
        return load.warmup + load.max_run_s
    first = load.warmup + max(load.max_run_s, search.probe_duration(search.low, load.duration))
    return first + (search.max_steps - 1) * (load.warmup + load.max_run_s)


def server_starts(spec: JobSpec) -> int:
    """How many times the job starts a server: once per backend, or once per backend and round with fresh servers,
    or once per model of each co-location run."""
    if spec.colocate is not None:
        return colocate.server_starts(len(spec.colocate.models) + 1)
    servers = len(configurations(spec.sweep, spec.server)) if spec.sweep else 1
    return len(spec.backends) * servers * (spec.repeats.count if spec.repeats.fresh_server else 1)


def estimate_seconds(spec: JobSpec) -> float:
    """A first estimate of a job's run time: every point's warm-up and duration plus a start cost per server start
    (a co-location group's points run at once: one point's time per group)."""
    per_point = _point_seconds(spec)
    servers = len(configurations(spec.sweep, spec.server)) if spec.sweep else 1
    n_points = len(spec.backends) * servers * len(spec.batch_sizes) * len(spec.load.rates) * spec.repeats.count
    if spec.colocate is not None:
        n_points = len(colocate.runs(len(spec.colocate.models) + 1))
    return n_points * per_point + START_COST_S * server_starts(spec)


def overload_allowance_s(spec: JobSpec, n_points: int) -> float:
    """What `n_points` of this spec can add to the estimate when every run overloads its server: each run's drain
    bound. The estimate plus this is the most the runs can take (server starts aside)."""
    return n_points * _runs_per_point(spec) * drain_bound_s(spec.load.duration)
