"""The leader's ASGI app: clients and background loops live in the lifespan."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable

import redis.asyncio as aioredis
from fastapi import APIRouter, FastAPI
from pymongo import AsyncMongoClient
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import ConnectionFailure
from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

from common import tracing
from leader import dbhealth
from leader.api import API_PREFIX, audit, errors
from leader.api.deps import Resources
from leader.api.readlimit import ReadLimit
from leader.api.routes import analysis as analysis_routes
from leader.api.routes import audit as audit_routes
from leader.api.routes import (
    data,
    fleetchecks,
    followers,
    health,
    imports,
    jobs,
    models,
    progress,
    records,
    secrets,
    shard_barrier,
    teams,
    tokens,
)
from leader.api.uploads import UploadSlots
from leader.clock import Ages
from leader.dbhealth import DbHealth
from leader.metrics import LeaderMetrics
from leader.placement.monitor import Monitor
from leader.placement.placer import Placer
from leader.placement.queue import TaskQueue
from leader.settings import LeaderSettings
from leader.store import audit as audit_store
from leader.store import fleetchecks as fleetchecks_store
from leader.store import followers as followers_store
from leader.store import jobs as jobs_store
from leader.store import leaderboard as leaderboard_store
from leader.store import migrations, retention
from leader.store import models as models_store
from leader.store import orphans as orphans_store
from leader.store import results as results_store
from leader.store import secrets as secrets_store
from leader.store import sessions as sessions_store
from leader.store import shard_points as shard_points_store
from leader.store import users as users_store
from leader.telemetry import start_server as start_telemetry
from leader.web import apidocs
from leader.web import pages as web_pages
from leader.web.headers import SecurityHeaders

log = logging.getLogger(__name__)

# Fail a request within seconds when PerfDB is unreachable rather than hang for pymongo's default 30 s.
SERVER_SELECTION_TIMEOUT_MS = 5000
# No database read waits without bound: a connection that stalls (a half-dead link, a server that never answers) fails
# with a network error, which answers 503 and marks the database down, instead of holding the request forever. The
# leader's longest single round trip (a journaled write, one batch of raw records) is far below it.
SOCKET_TIMEOUT_MS = 15_000
# Nor does a request wait without bound for a pooled connection.
WAIT_QUEUE_TIMEOUT_MS = 10_000
# The longest one shutdown step (stopping the loops, gRPC, a client) may take before the leader goes on without it,
# and all of them together: after the server's own 2 s grace (leader/__main__.py) the leader is gone within 8 s of a
# SIGTERM, inside the 10 s a container runtime waits before it kills (compose's `down` once found the leader still
# closing its clients and killed it: exit 137).
SHUTDOWN_STEP_S = 5.0
SHUTDOWN_TOTAL_S = 6.0


async def ensure_indexes(resources: Resources) -> None:
    """Create every store's indexes (idempotent)."""
    for store in (
        jobs_store,
        models_store,
        followers_store,
        results_store,
        users_store,
        sessions_store,
        audit_store,
        fleetchecks_store,
        shard_points_store,
        secrets_store,
    ):
        await store.ensure_indexes(resources.db)
    await leaderboard_store.ensure_indexes(resources.db)


async def _bounded(what: str, step: Awaitable[object], deadline: float) -> None:
    """One shutdown step, given SHUTDOWN_STEP_S and no more than is left before `deadline` (monotonic): a client
    library that never returns does not hold the leader up."""
    allowed = max(0.1, min(SHUTDOWN_STEP_S, deadline - time.monotonic()))
    try:
        await asyncio.wait_for(step, timeout=allowed)
    except TimeoutError:
        log.warning("shutdown: %s did not stop within %.1f s; going on without it", what, allowed)


STARTUP_WAIT_S = 120.0  # how long a starting leader waits for PerfDB (started beside it, by compose or a chart)


async def _first_contact(resources: Resources) -> None:
    """Create the indexes and bring the schema to this leader's (leader/store/migrations.py), waiting up to
    STARTUP_WAIT_S for PerfDB to answer: a leader started beside its database (compose, a Helm release) waits for it,
    saying so, instead of exiting on the first refused connection."""
    deadline = time.monotonic() + STARTUP_WAIT_S
    while True:
        try:
            await ensure_indexes(resources)
            await migrations.migrate(resources.db)
            if await leaderboard_store.repair(resources.db):
                log.warning("leaderboard rows were left half-written by a stopped leader: counted again")
            await leaderboard_store.restamp(resources.db)  # (migrations may have changed rows: no cached page holds)
            return
        except ConnectionFailure as exc:  # (a refused credential or a bad URI is not a database still starting)
            if time.monotonic() > deadline:
                raise
            log.warning("PerfDB does not answer yet (%s); waiting for it", type(exc).__name__)
            await asyncio.sleep(2.0)


def _ondemand(
    settings: LeaderSettings, db: AsyncDatabase, placer: Placer, beats: followers_store.Beats
) -> list[asyncio.Task[None]]:
    """The on-demand pod launcher's loop, when a Job template is configured (Kubernetes mode)."""
    if settings.ondemand_template is None:
        return []
    from leader.placement import ondemand

    launcher = ondemand.Launcher(
        db=db,
        kube=ondemand.ClusterJobs(settings.ondemand_namespace),
        template=ondemand.load_template(settings.ondemand_template),
        queue=settings.ondemand_queue,
        max_pods=settings.ondemand_max_pods,
        interval_s=settings.place_interval_s * 4,
        on_pinned=placer.nudge,
        on_forgotten=beats.forget,  # (one on-demand follower per job: kept, their last beats would pile up)
    )
    log.info("benchmarks run as on-demand Kubernetes Jobs (at most %d at once)", settings.ondemand_max_pods)
    return [asyncio.create_task(launcher.run(), name="ondemand-launcher")]


async def _retention(settings: LeaderSettings, db: AsyncDatabase) -> None:
    """The retention sweep (leader/store/retention.py)."""
    policy = retention.Retention(
        jobs_days=settings.retention_jobs_days,
        records_days=settings.retention_records_days,
        progress_days=settings.retention_progress_days,
        audit_days=settings.retention_audit_days,
    )
    await retention.sweep(db, policy, interval_s=settings.retention_sweep_s)


def create_app(settings: LeaderSettings) -> FastAPI:
    """Build the leader app; nothing connects until the lifespan starts."""

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # journal=True: a write is acknowledged once it is in the database's journal, so what the leader acknowledged
        # survives a crash of the database (SecantusDB as launched lost every acknowledged insert to SIGKILL without
        # it; bench/dbdurability.py measures the cost).
        client: AsyncMongoClient = AsyncMongoClient(
            settings.mongo_uri,
            tz_aware=True,
            serverSelectionTimeoutMS=SERVER_SELECTION_TIMEOUT_MS,
            journal=True,
            socketTimeoutMS=SOCKET_TIMEOUT_MS,
            waitQueueTimeoutMS=WAIT_QUEUE_TIMEOUT_MS,
        )
        redis = aioredis.from_url(settings.redis_url, socket_timeout=2.0, socket_connect_timeout=2.0)
        queue = TaskQueue(settings.redis_url)
        db = client[settings.db_name]
        placer = Placer(
            db=db,
            queue=queue,
            interval_s=settings.place_interval_s,
            policy=settings.placement_policy,
            lookahead=settings.placement_lookahead,
            ageing_per_s=settings.ageing_per_s,
            wait_bound=settings.wait_bound,
        )
        heard = Ages()
        db_health = DbHealth(settings.mongo_uri)
        monitor = Monitor(
            db=db,
            heard=heard,
            missing_after_s=settings.missing_after_s,
            interval_s=settings.monitor_interval_s,
            on_requeue=placer.nudge,
            deaf_s=db_health.deaf_s,
        )
        resources = Resources(settings=settings, client=client, db=db, redis=redis, placer=placer, heard=heard)
        app.state.dbhealth = db_health
        tasks: list[asyncio.Task[None]] = []
        telemetry = None
        app.state.telemetry_address = None
        tracing.setup("benchfleet-leader")  # spans exported over OTLP where configured (common/tracing.py)
        try:
            await _first_contact(resources)
            app.state.resources = resources
            if settings.grpc_port:
                tls = None
                if settings.tls_certfile is not None and settings.tls_keyfile is not None:
                    tls = (settings.tls_certfile.read_bytes(), settings.tls_keyfile.read_bytes())
                telemetry = await start_telemetry(resources, settings.grpc_host, settings.grpc_port, tls)
            if telemetry is not None:
                host = "" if settings.grpc_host in ("0.0.0.0", "::") else settings.grpc_host
                app.state.telemetry_address = settings.grpc_advertise or f"{host}:{telemetry[1]}"
            tasks = [
                *_ondemand(settings, db, placer, resources.beats),
                asyncio.create_task(db_health.run(), name="perfdb-probe"),
                asyncio.create_task(orphans_store.sweep(db), name="orphan-sweep"),
                asyncio.create_task(_retention(settings, db), name="retention"),
                asyncio.create_task(placer.run(), name="placement"),
                asyncio.create_task(monitor.run(), name="liveness"),
                asyncio.create_task(metrics.run(db, resources.jobs_index, book=lambda: placer.book), name="metrics"),
            ]
            log.info("leader ready (db %s)", settings.db_name)
            yield
        finally:
            deadline = time.monotonic() + SHUTDOWN_TOTAL_S
            for task in tasks:
                task.cancel()
            await _bounded("background loops", asyncio.gather(*tasks, return_exceptions=True), deadline)
            if telemetry is not None:
                await _bounded("telemetry gRPC", telemetry[0].stop(grace=1.0), deadline)
            await _bounded("the job queue", asyncio.to_thread(queue.close), deadline)  # (a broker already gone may block)
            await _bounded("traces", asyncio.to_thread(tracing.flush), deadline)
            await _bounded("redis", redis.aclose(), deadline)
            await _bounded("database probe", db_health.close(), deadline)
            await _bounded("database", client.close(), deadline)

    # /docs is served from the package's own Swagger UI (leader/web/apidocs.py); FastAPI's default pages use a CDN.
    app = FastAPI(title="benchfleet leader", version="1", lifespan=lifespan, docs_url=None, redoc_url=None)
    errors.install(app)
    audit.install(app)  # who changed what (after the database guard: a 503 while it is down is not stored)
    dbhealth.install(app)  # a fast 503 with Retry-After while PerfDB is unreachable
    metrics = LeaderMetrics()
    metrics.install(app)  # GET /metrics (Prometheus) and request timing
    app.state.metrics = metrics
    app.state.uploads = UploadSlots(settings.max_uploads_per_user, settings.max_uploads)
    api = APIRouter(prefix=API_PREFIX)
    routers = (
        jobs,
        imports,
        models,
        followers,
        fleetchecks,
        tokens,
        teams,
        records,
        progress,
        data,
        audit_routes,
        secrets,
        shard_barrier,
    )
    for module in routers:
        api.include_router(module.router)
    api.include_router(secrets.job_router)
    app.include_router(api)
    app.include_router(health.router)
    app.include_router(analysis_routes.router, prefix=API_PREFIX)
    web_pages.install(app)  # the web pages, their login and static assets
    apidocs.install(app)  # /docs, offline
    errors.document(app, API_PREFIX)  # every operation's error statuses, in the one error shape
    # Heavy reads a few at a time, refused (429) before they reach the database or the app's other layers.
    app.add_middleware(ReadLimit, per_client=settings.max_reads_per_client, total=settings.max_reads)
    app.add_middleware(SecurityHeaders)  # frame, sniff and referrer rules on every response (a 429 of ReadLimit's too)
    # Outermost: a trusted proxy's forwarded scheme and client address are what every layer below sees.
    app.add_middleware(ProxyHeadersMiddleware, trusted_hosts=[h.strip() for h in settings.trusted_proxies.split(",")])
    return app
