"""The point runner: start a backend once, measure cold start, measure every point, stop it."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from pathlib import Path
from urllib.parse import urlsplit

from common import tracing
from common.formats import hfbundle
from common.spec.job import MODEL_CODE_BACKENDS, PointSpec
from common.spec.target import TargetSpec
from common.wire.models import ModelMeta
from common.wire.results import ColdStart, PointResult
from follower.backends import Backend, get_backend
from follower.backends.endpoint import EndpointBackend
from follower.host import netshape
from follower.host import sandbox as sandboxes
from follower.host.cpuplan import plan_cpus
from follower.host.wakeup import WakeupHold, hold_wakeup_latency
from follower.loadgen.calibrate import TargetCosts, calibrate
from follower.loadgen.llmprompts import PromptMaker
from follower.point.context import PointContext, ServerRun
from follower.point.drive import REQUEST_TIMEOUT_S
from follower.point.idle import probe
from follower.point.measure import measure_point
from follower.protocols import NO_CREDENTIALS, Credentials, Endpoint, infer_url, protocol_of

log = logging.getLogger(__name__)

FIRST_ANSWER_TIMEOUT_S = 60.0


@dataclass
class Served:
    """A server that answers: the context its points read, its cold start, and its shaped link (a job's `network`)."""

    ctx: PointContext
    cold: ColdStart | None  # None for a target: benchfleet started nothing, so it claims no cold start
    shaped: netshape.Shaped | None = None

    async def measure(self, point: PointSpec, *, first: bool) -> PointResult:
        """One point against this server, a span of the job's trace (the first carries the cold start; a shaped link's
        figures are recorded). With the job's `propagate_trace`, every request carries the point span's traceparent."""
        with tracing.span("point", attributes=_point_attributes(point)) as traced:
            ctx = self.ctx
            header = tracing.propagation_header(traced) if point.propagate_trace else None
            if header is not None:
                credentials = replace(ctx.run.credentials, headers=(*ctx.run.credentials.headers, header))
                ctx = replace(ctx, run=replace(ctx.run, credentials=credentials))
            if self.shaped is None:
                return await measure_point(point, ctx, self.cold if first else None)
            await asyncio.to_thread(self.shaped.point_started)
            result = await measure_point(point, ctx, self.cold if first else None)
            return result.model_copy(update={"network": await asyncio.to_thread(self.shaped.result)})


def _point_attributes(point: PointSpec) -> tracing.Attributes:
    """What a point's span says of it."""
    load = point.concurrency if point.pattern == "closed" and point.concurrency else point.rate
    return {
        "benchfleet.point": point.index,
        "benchfleet.backend": point.backend,
        "benchfleet.batch_size": point.batch_size,
        "benchfleet.pattern": point.pattern,
        "benchfleet.load": float(load or 0),
    }


async def run_backend(backend_name: str, points: list[PointSpec], run: ServerRun) -> AsyncIterator[PointResult]:
    """Serve a model with one backend and yield a PointResult per point; the server is always stopped at the end."""
    async with serving(backend_name, points[0] if points else None, run) as served:
        for i, point in enumerate(points):
            yield await served.measure(point, first=i == 0)


@contextlib.asynccontextmanager
async def serving(backend_name: str, first: PointSpec | None, run: ServerRun) -> AsyncIterator[Served]:
    """Start `run.model` on one backend (configured like `first`, the first point it serves), wait until it answers,
    and hold it while the caller measures; it is always stopped, and its sandbox removed, at the end. With
    `run.target` (backend `endpoint`) nothing is started: the endpoint is driven and no cold start is claimed."""
    run.workdir.mkdir(parents=True, exist_ok=True)
    sandbox = None
    if run.target is None:
        sandbox = await asyncio.to_thread(
            sandboxes.for_server,
            run.workdir,
            runs_model_code=backend_name in MODEL_CODE_BACKENDS,
            trusted=run.model.trusted,
            what=f"{backend_name} serving model {run.model.ref}",
        )
    backend: Backend | None = None
    try:
        if sandbox is not None:
            sandbox.allow_read([run.model_path])
            sandbox.allow_write(run.writable)
        elif run.network is not None:
            raise RuntimeError(f"network conditions cannot be applied here: {netshape.support().note}")
        backend = _backend(backend_name, first, run, sandbox)
        backend.extra_env.update(run.extra_env)
        with hold_wakeup_latency(run.wakeup_latency_us) as wakeup:
            if wakeup.held_us is None:
                log.warning("CPU wake-up latency %s: idle CPUs may halt between requests", wakeup.describe())
            with tracing.span("server.start", attributes={"benchfleet.backend": backend_name, "benchfleet.model": run.model.ref}):
                served = await _answering(backend_name, first, run, backend, sandbox, wakeup)
            yield served
    finally:
        # Shielded: a second cancellation while stopping must not leave the server (or its sandbox) behind.
        await asyncio.shield(asyncio.to_thread(_stop, backend, sandbox))


def _backend(backend_name: str, first: PointSpec | None, run: ServerRun, sandbox: sandboxes.Sandbox | None) -> Backend:
    if run.target is not None:
        return EndpointBackend(run.target, run.credentials)
    cpus = run.cpus if run.cpus is not None else plan_cpus().server
    return get_backend(backend_name, cpus=cpus, server=first.server if first else None, sandbox=sandbox)


async def _answering(
    backend_name: str,
    first: PointSpec | None,
    run: ServerRun,
    backend: Backend,
    sandbox: sandboxes.Sandbox | None,
    wakeup: WakeupHold,
) -> Served:
    """Start the server, wait until it is ready and answers a first request (its cold start), shape its link, and
    calibrate the generator against a target: the server run as its points will read it."""
    model = run.model
    await asyncio.to_thread(backend.start, run.model_path, model, run.workdir)
    to_ready_s = await asyncio.to_thread(backend.wait_ready, run.ready_limit_s)
    endpoint = backend.serves(model)
    shaped = None
    if run.network is not None and sandbox is not None:
        shaped = netshape.Shaped(sandbox, run.network)
        where = urlsplit(endpoint.base)
        await asyncio.to_thread(netshape.shape, sandbox, run.network)
        await asyncio.to_thread(shaped.measure, where.hostname or sandbox.host, where.port or 80)
    ready_at_ns = time.monotonic_ns()
    prompts = await asyncio.to_thread(prompt_maker, model, run.model_path) if model.is_llm else None
    asked, body = probe(model, prompts, endpoint, first.batch_size if first else 1, run.samples, first.llm if first else None)
    await first_answer(asked, body, FIRST_ANSWER_TIMEOUT_S, run.credentials)
    cold, cost_s = None, None
    if run.target is not None:
        cost_s = await calibrated(run.target, asked, body, run.credentials, run.target_costs)
        log.info("endpoint %s answers (%s)", endpoint.base, backend.version())
    else:
        to_first_answer_s = to_ready_s + (time.monotonic_ns() - ready_at_ns) / 1e9
        cold = ColdStart(to_ready_s=to_ready_s, to_first_answer_s=to_first_answer_s)
        log.info("%s ready in %.3fs, first answer at %.3fs", backend_name, cold.to_ready_s, cold.to_first_answer_s)
    ctx = PointContext(
        run=run,
        backend=backend,
        endpoint=endpoint,
        backend_version=backend.version(),
        wakeup=wakeup,
        prompts=prompts,
        cpu_per_request_s=cost_s,
        conversion=backend.conversion,
    )
    return Served(ctx, cold, shaped)


async def calibrated(
    target: TargetSpec, endpoint: Endpoint, body: bytes, credentials: Credentials, kept: TargetCosts | None
) -> float | None:
    """The generator's cost per request against the target: measured now (and kept), else as kept before, else None."""
    cost_s = await asyncio.to_thread(calibrate, endpoint, [body], credentials=credentials)
    if cost_s is not None:
        log.info("generator cost against %s: %.1f us per request", target.url, cost_s * 1e6)
        if kept is not None:
            await asyncio.to_thread(kept.put, target.cost_key, cost_s)
        return cost_s
    us = (await asyncio.to_thread(kept.all)).get(target.cost_key) if kept is not None else None
    return us / 1e6 if us is not None else None


def _stop(backend: Backend | None, sandbox: sandboxes.Sandbox | None) -> None:
    try:
        if backend is not None:
            backend.stop()
    finally:
        if sandbox is not None:
            sandbox.close()


def prompt_maker(model: ModelMeta, model_path: Path) -> PromptMaker:
    """The language model's own tokenizer, read from its upload (checked as the leader checked it)."""
    return PromptMaker(*hfbundle.tokenizer_files(Path(model_path), limit_bytes=hfbundle.unpack_limit(Path(model_path))))


async def first_answer(endpoint: Endpoint, body: bytes, timeout_s: float, credentials: Credentials = NO_CREDENTIALS) -> None:
    """Send one inference request, retrying briefly, until the server answers 200 (the end of cold start)."""
    deadline = time.monotonic() + timeout_s
    last = "no answer"
    opened = protocol_of(endpoint).open_transport(
        endpoint, max_concurrency=1, timeout_s=min(timeout_s, REQUEST_TIMEOUT_S), raw_http=False, credentials=credentials
    )
    async with opened as transport:
        encoded = transport.encode(body)
        while time.monotonic() < deadline:
            try:
                answer = await transport.request(encoded)
                if answer.status == 200:
                    return
                last = answer.error or f"status {answer.status}"
                if answer.status == 400:
                    break  # our own request is malformed: retrying cannot help
            except transport.errors as exc:
                last = f"{type(exc).__name__}: {exc}"
            await asyncio.sleep(0.05)
    url = infer_url(endpoint)
    raise RuntimeError(f"server at {url} gave no successful inference answer within {timeout_s:g}s: {last}")
