"""The point runner: start a backend once, measure cold start, measure every point, stop it."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import numpy as np

from common import hfbundle
from common.llmdata import PromptRow
from common.llmspec import LlmWorkload
from common.models import ModelMeta
from common.netspec import NetworkSpec
from common.results import ColdStart, PointResult
from common.spec import MODEL_CODE_BACKENDS, SLO, PointSpec
from common.targetspec import TargetSpec
from common.traces import Trace
from follower.backends import Backend, get_backend
from follower.backends.endpoint import EndpointBackend
from follower.host import netshape
from follower.host import sandbox as sandboxes
from follower.host.cpuplan import plan_cpus
from follower.host.sampler import SamplerConfig
from follower.host.wakeup import hold_wakeup_latency
from follower.loadgen.bodies import Samples, build_bodies
from follower.loadgen.calibrate import TargetCosts, calibrate
from follower.loadgen.llmprompts import PromptMaker, request_body
from follower.loadgen.timing import Timer
from follower.loadgen.transports import NO_CREDENTIALS, Credentials, open_transport
from follower.point.context import PointContext, ProgressSink, RecordsSink, ShardLink, backend_wire
from follower.point.drive import REQUEST_TIMEOUT_S
from follower.point.measure import measure_point

log = logging.getLogger(__name__)

READY_TIMEOUT_S = 120.0
FIRST_ANSWER_TIMEOUT_S = 60.0
DEFAULT_TIMER: Timer = "yield"


@dataclass
class Served:
    """A server that answers: the context its points read, its cold start, and its shaped link (a job's `network`)."""

    ctx: PointContext
    cold: ColdStart | None  # None for a target: benchfleet started nothing, so it claims no cold start
    shaped: netshape.Shaped | None = None

    async def measure(self, point: PointSpec, *, first: bool) -> PointResult:
        """One point against this server (the first carries the cold start; a shaped link's figures are recorded)."""
        if self.shaped is None:
            return await measure_point(point, self.ctx, self.cold if first else None)
        await asyncio.to_thread(self.shaped.point_started)
        result = await measure_point(point, self.ctx, self.cold if first else None)
        return result.model_copy(update={"network": await asyncio.to_thread(self.shaped.result)})


async def run_backend(backend_name: str, points: list[PointSpec], **options: Any) -> AsyncIterator[PointResult]:
    """Serve a model with one backend and yield a PointResult per point; the server is always stopped at the end.
    `options` are serving()'s."""
    async with serving(backend_name, points[0] if points else None, **options) as served:
        for i, point in enumerate(points):
            yield await served.measure(point, first=i == 0)


@contextlib.asynccontextmanager
async def serving(
    backend_name: str,
    first: PointSpec | None,
    *,
    model: ModelMeta,
    model_path: Path,
    workdir: Path,
    env_base: Mapping[str, Any],
    slo: SLO | None,
    ready_timeout_s: float = READY_TIMEOUT_S,
    timer: Timer = DEFAULT_TIMER,
    records_sink: RecordsSink | None = None,
    progress_sink: ProgressSink | None = None,
    sampling: SamplerConfig | None = None,
    samples: Samples | None = None,
    trace: Trace | None = None,
    prompt_rows: list[PromptRow] | None = None,
    forced_generators: int | None = None,
    wakeup_latency_us: int | None = 0,
    max_in_flight: int = 4096,
    network: NetworkSpec | None = None,
    cpus: frozenset[int] | None = None,
    extra_env: Mapping[str, str] | None = None,
    writable: Sequence[Path] = (),
    target: TargetSpec | None = None,
    credentials: Credentials = NO_CREDENTIALS,
    shard: ShardLink | None = None,
    target_costs: TargetCosts | None = None,
) -> AsyncIterator[Served]:
    """Start `model` on one backend (configured like `first`, the first point it serves), wait until it answers, and
    hold it while the caller measures; it is always stopped, and its sandbox removed, at the end.

    The arguments become one PointContext once the server answers, read by every point. `records_sink`, if given,
    receives each point's raw per-request records and window summary. While the server runs, the CPUs' wake-up
    latency is held at `wakeup_latency_us` (follower/host/wakeup.py; None leaves the host alone). With `network`, the
    link to the server is shaped once it is ready (follower/host/netshape.py) and each point records the conditions.
    `cpus`: the server's cores (default: every server core of the plan); `extra_env`: more environment for it;
    `writable`: directories it may write besides its home (in its sandbox). With `target` (backend `endpoint`) nothing
    is started: the endpoint is driven with `credentials` and no cold start is claimed; `shard`: this follower drives
    its share of every point of a sharded job (follower/point/shard.py); `target_costs`: where the generator's cost
    per request against a target is kept (calibrated once the target answers, follower/loadgen/calibrate.py).
    """
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    sandbox = None if target is not None else await asyncio.to_thread(
        sandboxes.for_server, workdir, runs_model_code=backend_name in MODEL_CODE_BACKENDS,
        trusted=model.trusted, what=f"{backend_name} serving model {model.ref}",
    )  # fmt: skip
    backend: Backend | None = None
    try:
        if sandbox is not None:
            sandbox.allow_read([Path(model_path)])
            sandbox.allow_write(writable)
        elif network is not None:
            raise RuntimeError(f"network conditions cannot be applied here: {netshape.support().note}")
        if target is not None:
            backend = EndpointBackend(target, credentials)
        else:
            backend = get_backend(backend_name, cpus=cpus if cpus is not None else plan_cpus().server,
                                  server=first.server if first else None, sandbox=sandbox)  # fmt: skip
        backend.extra_env.update(extra_env or {})
        with hold_wakeup_latency(wakeup_latency_us) as wakeup:
            if wakeup.held_us is None:
                log.warning("CPU wake-up latency %s: idle CPUs may halt between requests", wakeup.describe())
            await asyncio.to_thread(backend.start, Path(model_path), model, workdir)
            to_ready_s = await asyncio.to_thread(backend.wait_ready, ready_timeout_s)
            url = backend.infer_url(model)
            shaped = None
            if network is not None and sandbox is not None:
                shaped = netshape.Shaped(sandbox, network)
                where = urlsplit(url)
                await asyncio.to_thread(netshape.shape, sandbox, network)
                await asyncio.to_thread(shaped.measure, where.hostname or sandbox.host, where.port or 80)
            ready_at_ns = time.monotonic_ns()
            prompts = await asyncio.to_thread(prompt_maker, model, model_path) if model.is_llm else None
            if prompts is not None:
                probe = request_body(LlmWorkload(stream=False), model.name, prompts.prompt(4, np.random.default_rng(0)), 1)
            else:
                probe = build_bodies(model.inputs, first.batch_size if first else 1, seed=0, variants=1,
                                     wire=backend_wire(backend), samples=samples)[0]  # fmt: skip
            await first_answer(url, probe, FIRST_ANSWER_TIMEOUT_S, credentials)
            cold, cost_s = None, None
            if target is not None:
                cost_s = await calibrated(target, url, probe, credentials, target_costs)
            if target is None:
                cold = ColdStart(to_ready_s=to_ready_s, to_first_answer_s=to_ready_s + (time.monotonic_ns() - ready_at_ns) / 1e9)
                log.info("%s ready in %.3fs, first answer at %.3fs", backend_name, cold.to_ready_s, cold.to_first_answer_s)
            else:
                log.info("endpoint %s answers (%s)", url, backend.version())
            ctx = PointContext(
                backend=backend, url=url, model=model, env_base=env_base, slo=slo, backend_version=backend.version(),
                timer=timer, records_sink=records_sink, progress_sink=progress_sink, sampling=sampling or SamplerConfig(),
                samples=samples, trace=trace, forced_generators=forced_generators, wakeup=wakeup,
                max_in_flight=max_in_flight, prompts=prompts, prompt_rows=prompt_rows, credentials=credentials,
                shard=shard, cpu_per_request_s=cost_s,
            )  # fmt: skip
            yield Served(ctx, cold, shaped)
    finally:
        # Shielded: a second cancellation while stopping must not leave the server (or its sandbox) behind.
        await asyncio.shield(asyncio.to_thread(_stop, backend, sandbox))


async def calibrated(target: TargetSpec, url: str, body: bytes, credentials: Credentials,
                     kept: TargetCosts | None) -> float | None:  # fmt: skip
    """The generator's cost per request against the target: measured now (and kept), else as kept before, else None."""
    cost_s = await asyncio.to_thread(calibrate, url, [body], credentials=credentials)
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


async def first_answer(url: str, body: bytes, timeout_s: float, credentials: Credentials = NO_CREDENTIALS) -> None:
    """Send one inference request, retrying briefly, until the server answers 200 (the end of cold start)."""
    deadline = time.monotonic() + timeout_s
    last = "no answer"
    async with open_transport(url, max_concurrency=1, timeout_s=min(timeout_s, REQUEST_TIMEOUT_S), raw_http=False,
                              credentials=credentials) as transport:  # fmt: skip
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
    raise RuntimeError(f"server at {url} gave no successful inference answer within {timeout_s:g}s: {last}")
