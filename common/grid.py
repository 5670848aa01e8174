"""A job's grid: its points (backends × batch sizes × rates, in a stable order) and its first run-time estimate."""

from __future__ import annotations

from common.loadspec import TraceRef
from common.spec import JobSpec, PointSpec, ServerOptions

# What starting one backend's server costs a job before its first point (start, load, first answer), in seconds:
# the part of an estimate that does not scale with the points.
START_COST_S = 5.0


def _served(spec: JobSpec) -> ServerOptions:
    """The job's server options, with the processors that run server-side when `data.processing` is server."""
    if spec.data.processing != "server":
        return spec.server
    return spec.server.model_copy(update={"preprocess": spec.data.preprocess, "postprocess": spec.data.postprocess})


# The load settings every point carries as they are: PointSpec field ← LoadSpec field. The other LoadSpec fields are
# resolved per point (PER_POINT). A point is the resolved, stored form the follower reads (seconds as `_s` floats,
# one rate); tests/unit/common/test_grid.py holds that every LoadSpec field is one or the other.
POINT_FROM_LOAD = {
    "pattern": "pattern", "duration_s": "duration", "warmup_s": "warmup", "max_concurrency": "max_concurrency",
    "cap_policy": "cap_policy", "cv": "cv", "rate_end": "rate_end", "steps": "steps", "spike_rate": "spike_rate",
    "spike_at_s": "spike_at", "spike_duration_s": "spike_duration", "on_s": "on", "off_s": "off", "search": "search",
    "window_s": "window", "stability": "stability",
}  # fmt: skip
# LoadSpec fields a point gets resolved: one rate or user count of the ladder, the inline trace or the uploaded one.
PER_POINT = ("rate", "concurrency", "trace")


def expand(spec: JobSpec) -> list[PointSpec]:
    """Expand the grid backends × batch sizes × rates into points, in a stable order."""
    load, server = spec.load, _served(spec)
    shared = {point_field: getattr(load, load_field) for point_field, load_field in POINT_FROM_LOAD.items()}
    trace_s = load.trace if isinstance(load.trace, list) else None
    trace_dataset = load.trace.dataset if isinstance(load.trace, TraceRef) else None
    points: list[PointSpec] = []
    for backend in spec.backends:
        for batch in spec.batch_sizes:
            for rate, concurrency in load.ladder():
                index = len(points)
                points.append(PointSpec(
                    index=index, backend=backend, batch_size=batch, rate=rate, concurrency=concurrency,
                    seed=(spec.seed * 1_000_003 + index) % 2**32, trace_s=trace_s, trace_dataset=trace_dataset,
                    server=server, **shared,
                ))  # fmt: skip
    return points


def estimate_seconds(spec: JobSpec) -> float:
    """A first estimate of a job's run time: every point's warm-up and duration plus a start cost per backend."""
    per_point = spec.load.warmup + spec.load.max_run_s
    if spec.load.search is not None:
        per_point *= spec.load.search.max_steps  # every search step is a run of its own
    n_points = len(spec.backends) * len(spec.batch_sizes) * len(spec.load.rates)
    return n_points * per_point + START_COST_S * len(spec.backends)
