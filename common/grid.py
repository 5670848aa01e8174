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


def expand(spec: JobSpec) -> list[PointSpec]:
    """Expand the grid backends × batch sizes × rates into points, in a stable order."""
    points: list[PointSpec] = []
    for backend in spec.backends:
        for batch in spec.batch_sizes:
            for rate, concurrency in spec.load.ladder():
                index = len(points)
                load = spec.load
                points.append(
                    PointSpec(
                        index=index,
                        backend=backend,
                        batch_size=batch,
                        pattern=load.pattern,
                        rate=rate,
                        duration_s=load.duration,
                        warmup_s=load.warmup,
                        max_concurrency=load.max_concurrency,
                        seed=(spec.seed * 1_000_003 + index) % 2**32,
                        cap_policy=load.cap_policy,
                        cv=load.cv,
                        rate_end=load.rate_end,
                        steps=load.steps,
                        spike_rate=load.spike_rate,
                        spike_at_s=load.spike_at,
                        spike_duration_s=load.spike_duration,
                        on_s=load.on,
                        off_s=load.off,
                        trace_s=load.trace if isinstance(load.trace, list) else None,
                        trace_dataset=load.trace.dataset if isinstance(load.trace, TraceRef) else None,
                        concurrency=concurrency,
                        search=load.search,
                        window_s=load.window,
                        stability=load.stability,
                        server=_served(spec),
                    )
                )
    return points


def estimate_seconds(spec: JobSpec) -> float:
    """A first estimate of a job's run time: every point's warm-up and duration plus a start cost per backend."""
    per_point = spec.load.warmup + spec.load.max_run_s
    if spec.load.search is not None:
        per_point *= spec.load.search.max_steps  # every search step is a run of its own
    n_points = len(spec.backends) * len(spec.batch_sizes) * len(spec.load.rates)
    return n_points * per_point + START_COST_S * len(spec.backends)
