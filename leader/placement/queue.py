"""The Celery producer: one task per job attempt on the chosen follower's own queue."""

from __future__ import annotations

import functools

import anyio.to_thread
from celery import Celery

from common.wire.jobs import JobTask
from common.wire.messaging import RUN_JOB_TASK, make_celery, queue_for

# Give up on a publish quickly when Redis is down: the placement loop requeues the job and retries next tick.
PUBLISH_RETRY_POLICY = {"max_retries": 2, "interval_start": 0.0, "interval_step": 0.2, "interval_max": 0.5}


class TaskQueue:
    """Sends run-job tasks; publishing blocks on the broker, so it runs in a worker thread."""

    def __init__(self, broker_url: str) -> None:
        self.celery: Celery = make_celery(broker_url, "benchfleet-leader")
        self.celery.conf.broker_connection_timeout = 2.0

    async def send_job(self, task: JobTask, *, follower_id: str) -> None:
        """Publish the task on `follower.<id>`; raises if the broker cannot be reached."""
        send = functools.partial(
            self.celery.send_task,
            RUN_JOB_TASK,
            args=[task.model_dump(mode="json")],
            queue=queue_for(follower_id),
            retry=True,
            retry_policy=PUBLISH_RETRY_POLICY,
        )
        await anyio.to_thread.run_sync(send)

    def close(self) -> None:
        """Release the broker connections."""
        self.celery.close()
