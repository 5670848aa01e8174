"""The follower agent process: register, heartbeat, and consume this follower's own Celery queue."""

from __future__ import annotations

import logging
import platform
import threading
import uuid

from celery import Celery

from common import __version__
from common.followers import FollowerInfo, Heartbeat
from common.messaging import RUN_JOB_TASK, make_celery, queue_for
from follower import hostinfo
from follower.backends import BACKENDS
from follower.execute import AgentState, execute
from follower.leader_client import LeaderClient
from follower.settings import FollowerSettings

log = logging.getLogger(__name__)


def follower_info(settings: FollowerSettings, incarnation: str) -> FollowerInfo:
    """This host's registration record."""
    facts = hostinfo.host_facts()
    backends = settings.backends if settings.backends is not None else sorted(BACKENDS)
    return FollowerInfo(
        follower_id=settings.follower_id,
        incarnation=incarnation,
        host=str(facts["host"]),
        cpu_model=str(facts["cpu_model"]),
        cpu_count=int(facts["cpu_count"]),  # type: ignore[call-overload]
        memory_mb=int(facts["memory_mb"]),  # type: ignore[call-overload]
        gpus=hostinfo.gpus(),
        backends=backends,
        version=__version__,
    )


class Heartbeater(threading.Thread):
    """Beats every interval; re-registers when the leader no longer knows this incarnation."""

    def __init__(self, settings: FollowerSettings, client: LeaderClient, state: AgentState, info: FollowerInfo) -> None:
        super().__init__(name="heartbeat", daemon=True)
        self.settings, self.client, self.state, self.info = settings, client, state, info
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(self.settings.heartbeat_interval_s):
            running = self.state.snapshot()
            beat = Heartbeat(incarnation=self.state.incarnation, state="busy" if running else "ready", running_job=running)
            try:
                if not self.client.heartbeat(self.settings.follower_id, beat).known:
                    log.warning("leader does not know this agent; registering again")
                    self.client.register(self.info)
            except Exception as exc:  # a missed beat is logged and retried on the next tick
                log.warning("heartbeat failed: %s", exc)


def build_celery(settings: FollowerSettings, client: LeaderClient, state: AgentState, info: FollowerInfo) -> Celery:
    """The Celery app whose one task runs a job attempt on this host."""
    app = make_celery(settings.redis_url, f"benchfleet-follower-{settings.follower_id}")
    env_base = {
        "follower_id": settings.follower_id,
        "host": info.host,
        "cpu_model": info.cpu_model,
        "cpu_count": info.cpu_count,
        "gpus": [gpu.name for gpu in info.gpus],
    }

    @app.task(name=RUN_JOB_TASK)
    def run_job(payload: dict) -> str:
        return execute(payload, settings=settings, client=client, state=state, env_base=env_base)

    return app


def run_agent(settings: FollowerSettings) -> None:
    """Register, start heartbeating, then consume jobs one at a time until stopped (SIGTERM: finish the running job)."""
    settings.work_dir.mkdir(parents=True, exist_ok=True)
    state = AgentState(incarnation=uuid.uuid4().hex)
    client = LeaderClient(settings.leader_url, settings.token.get_secret_value())
    info = follower_info(settings, state.incarnation)
    client.register(info)
    log.info(
        "follower %s registered (incarnation %s, backends %s, %d GPU(s), %s)",
        settings.follower_id, state.incarnation[:8], ",".join(info.backends), len(info.gpus), platform.node(),
    )
    heart = Heartbeater(settings, client, state, info)
    heart.start()
    app = build_celery(settings, client, state, info)
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
        heart.stopped.set()
        client.close()
