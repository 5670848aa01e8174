"""The follower agent process: register, heartbeat, and consume this follower's own Celery queue."""

from __future__ import annotations

import logging
import os
import platform
import signal
import threading
import uuid

from celery import Celery

from common import __version__, tracing
from common.logs import set_process_follower_id
from common.spec.job import MODEL_CODE_BACKENDS
from common.wire.followers import FollowerInfo
from common.wire.messaging import RUN_JOB_TASK, make_celery, queue_for
from follower.agent.heartbeat import Heartbeater, measured_clock
from follower.agent.holding import HoldingQueue
from follower.agent.runloop import RunLoop
from follower.attempt.execute import execute
from follower.backends import available_backends
from follower.host import hostinfo, netshape
from follower.host import sandbox as sandboxes
from follower.host.cpuplan import plan_cpus
from follower.host.gate import Gate
from follower.link.leader_client import LeaderClient, LeaderRejected
from follower.link.metrics import METRICS
from follower.link.outbox import Outbox
from follower.loadgen.calibrate import TargetCosts
from follower.loadgen.scaleout import COST
from follower.point.context import HostFacts
from follower.settings import FollowerSettings

log = logging.getLogger(__name__)

# A stop (SIGTERM) within 5 s: a heartbeat in flight is waited for at most this long before the leave...
HEARTBEAT_JOIN_S = 1.0
# ...and the running point and its server at most this long after it (a point stops on its cancel in about 2.5 s).
STOP_GRACE_S = 3.0


def follower_info(settings: FollowerSettings, incarnation: str) -> FollowerInfo:
    """This host's registration record."""
    facts = hostinfo.host_facts()
    # Advertise only what this host can run: a job needing a missing backend must not be placed here.
    backends, missing = available_backends(settings.backends)
    for name, why in missing.items():
        log.warning("backend %s not offered: %s", name, why)
    # Backends that run a model's code are offered for every model only where their servers can be sandboxed.
    sandbox = sandboxes.support()
    trusted_only = [] if sandbox.ok else [b for b in backends if b in MODEL_CODE_BACKENDS]
    if trusted_only:
        log.warning("backends %s offered for trusted models only: %s", ", ".join(trusted_only), sandbox.reason)
    shaping = netshape.support()
    if shaping.note:
        log.warning("network conditions: %s", shaping.note)
    return FollowerInfo(
        follower_id=settings.follower_id,
        incarnation=incarnation,
        host=facts["host"],
        cpu_model=facts["cpu_model"],
        cpu_count=facts["cpu_count"],
        memory_mb=facts["memory_mb"],
        gpus=hostinfo.gpus(),
        backends=[b for b in backends if b not in trusted_only],
        trusted_only=trusted_only,
        network_shaping=list(shaping.qdiscs),
        labels=settings.labels,
        network_shaping_note=shaping.note,
        generator_cores=max(len(plan_cpus().generator or ()), 1),
        cpu_per_request_us=round(COST.estimate_s * 1e6, 1),
        version=__version__,
    )


def host_facts_for(settings: FollowerSettings, info: FollowerInfo) -> HostFacts:
    """The host facts every point result of this follower carries."""
    return HostFacts(
        follower_id=settings.follower_id,
        host=info.host,
        cpu_model=info.cpu_model,
        cpu_count=info.cpu_count,
        gpus=tuple(gpu.name for gpu in info.gpus),
        platform=hostinfo.platform_record(),
    )


def build_celery(settings: FollowerSettings, holding: HoldingQueue) -> Celery:
    """The Celery app whose one task accepts a job into the holding queue; the run loop orders and runs it."""
    app = make_celery(settings.redis_url, f"benchfleet-follower-{settings.follower_id}")

    @app.task(name=RUN_JOB_TASK)
    def run_job(payload: dict) -> str:
        # Accept only: the job is on disk when this returns and the message is acked.
        entry = holding.accept(payload)
        log.info("job %s attempt %d held (estimate %.1fs, %d held)", entry.job_id, entry.attempt, entry.estimate_s, len(holding))
        return "held"

    return app


def run_agent(settings: FollowerSettings) -> None:
    """Register, start heartbeating, then consume jobs one at a time until stopped (SIGTERM: the leader takes the jobs
    back, the running point stops)."""
    settings.work_dir.mkdir(parents=True, exist_ok=True)
    set_process_follower_id(settings.follower_id)  # every log line of this agent carries its id
    tracing.setup("benchfleet-follower")  # spans exported over OTLP where configured (common/tracing.py)
    METRICS.start(settings.metrics_host, settings.metrics_port)
    incarnation = uuid.uuid4().hex
    client = LeaderClient(
        settings.leader_url,
        settings.token.get_secret_value(),
        credential_path=settings.work_dir / f"credential-{settings.follower_id}",
        ca_file=settings.leader_ca_file,
    )
    info = follower_info(settings, incarnation)
    info = info.model_copy(
        update={"clock": measured_clock(client), "target_costs_us": TargetCosts(settings.target_costs_path).all()}
    )
    try:
        client.register(info)
    except LeaderRejected as exc:  # refused for good (an incompatible contract, a revoked join token): say why and stop
        log.error("the leader refused this follower's registration: %s", exc)
        raise SystemExit(2) from None
    log.info(
        "follower %s registered (incarnation %s, backends %s, %d GPU(s), %s)",
        settings.follower_id,
        incarnation[:8],
        ",".join(info.backends),
        len(info.gpus),
        platform.node(),
    )
    holding = HoldingQueue(
        settings.held_dir, order=settings.order, ageing_per_s=settings.ageing_per_s, wait_bound=settings.wait_bound
    )
    gate = Gate(check_gpu=settings.wait_for_gpu, max_host_cpu_percent=settings.max_host_cpu_percent)
    host_facts = host_facts_for(settings, info)

    def run_held(payload: dict, cancel: threading.Event) -> str:
        outcome = execute(
            payload, settings=settings, client=client, incarnation=incarnation, host_facts=host_facts, cancel=cancel
        )
        if settings.exit_after_job and outcome != "stale":
            log.info("job ended (%s): this on-demand agent exits", outcome)
            heart.stopped.set()  # no beat after this: the leader forgets this agent, which must not register again
            os.kill(os.getpid(), signal.SIGTERM)  # the worker's warm shutdown, as a pod's stop would ask
        return outcome

    loop = RunLoop(holding, gate, run_held)
    loop.start()
    heart = Heartbeater(settings, client, info, loop)
    heart.start()
    # Reports a previous run buffered but never got acknowledged: offer them (the leader drops stale attempts).
    threading.Thread(target=Outbox(settings.work_dir / "outbox").flush, args=(client,), name="outbox", daemon=True).start()
    app = build_celery(settings, holding)
    try:
        app.worker_main(
            [
                "worker",
                "--pool=solo",  # one benchmark at a time per device
                "--concurrency=1",
                f"--queues={queue_for(settings.follower_id)}",
                f"--hostname={settings.follower_id}@%h",
                "--without-gossip",
                "--without-mingle",
                "--without-heartbeat",
                "--loglevel=INFO",
            ]
        )
    finally:
        # SIGTERM: take nothing more, give every job back to the leader at once (it places them again; nothing waits
        # for missed heartbeats), then stop the running point and its server. Held jobs left on disk are stale
        # attempts now: a restarted agent's claim of one is refused and it is dropped.
        log.info("stopping: giving the held and running jobs back to the leader")
        loop.stopped.set()
        heart.stopped.set()
        heart.join(HEARTBEAT_JOIN_S)  # a beat in flight lands before the leave, never after it
        try:
            client.leave(settings.follower_id, incarnation)
        except Exception as exc:  # the leader requeues them once the heartbeats stop
            log.warning("could not tell the leader this agent is stopping: %s", exc)
        if not loop.halt(STOP_GRACE_S):
            log.warning("the running job did not stop within %.0f s; exiting anyway", STOP_GRACE_S)
        METRICS.stop()
        client.close()
        log.info("stopped")
