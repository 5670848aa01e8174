"""A co-location job's runs (common/spec/colocate.py): each model alone, then each pair of models served at once, every
server with its own load, measured at the same time. The cores are shared by the servers of a run or split among
them; GPU servers may share the GPU through MPS (follower/host/mps.py)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

from common.spec.colocate import ColocateSpec
from common.spec.grid import server_runs
from common.spec.job import PointSpec
from common.wire.models import ModelMeta
from common.wire.results import PointResult
from follower.host.cpuplan import plan_cpus
from follower.host.mps import MpsDaemon
from follower.point.context import ServerRun
from follower.point.runner import serving

log = logging.getLogger(__name__)


def assign_cpus(cores: frozenset[int] | None, servers: int, mode: str) -> list[frozenset[int] | None]:
    """Each server's cores: all of them (shared), or an equal part of them (split; shared when there are fewer cores
    than servers, which is logged). None: unpinned (a one-core host)."""
    if mode == "shared" or servers == 1 or cores is None:
        return [cores] * servers
    ordered = sorted(cores)
    if len(ordered) < servers:
        log.warning("colocate: %d server cores cannot be split among %d servers; they share them", len(ordered), servers)
        return [cores] * servers
    return [frozenset(ordered[k::servers]) for k in range(servers)]


async def run_colocated(
    backend_name: str,
    points: list[PointSpec],
    run: ServerRun,
    *,
    models: Sequence[tuple[ModelMeta, Path]],
    colocate: ColocateSpec,
) -> AsyncIterator[PointResult]:
    """Yield every point's result, a group's in index order once all of its servers have been measured together.
    `models[k]`: model k's metadata and file (0: the job's, `run`'s); each server runs as `run` says, with its own
    model, cores, work directory and MPS share."""
    with contextlib.ExitStack() as daemons:
        mps = daemons.enter_context(MpsDaemon(run.workdir)) if colocate.mps else None
        shares: list[int | None] = [None] * len(models)
        if colocate.active_thread_percentage is not None:
            shares = list(colocate.active_thread_percentage)
        for group in server_runs(points, fresh_server=False):
            cores = assign_cpus(plan_cpus().server, len(group), colocate.cpus)
            async with contextlib.AsyncExitStack() as stack:
                served = []
                for point, cpus in zip(group, cores, strict=True):
                    model, path = models[point.served]
                    own = dataclasses.replace(
                        run,
                        model=model,
                        model_path=path,
                        cpus=cpus,
                        workdir=run.workdir / f"group{point.group}-model{point.served}",
                        extra_env=mps.client_env(shares[point.served]) if mps else {},
                        writable=tuple(mps.dirs) if mps else (),
                    )
                    served.append(await stack.enter_async_context(serving(backend_name, point, own)))
                together = [p.served for p in group]
                where = [sorted(c) if c else "any" for c in cores]
                log.info("colocate: group %s: models %s at once on cores %s", group[0].group, together, where)
                results = await asyncio.gather(*(s.measure(p, first=True) for s, p in zip(served, group, strict=True)))
            for result in results:
                yield result
