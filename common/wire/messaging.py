"""The leader↔follower queue protocol: task name, queue naming and the shared Celery configuration."""

from __future__ import annotations

from celery import Celery

RUN_JOB_TASK = "benchfleet.run_job"
HEARTBEAT_INTERVAL_S = 2.0
QUEUE_PREFIX = "follower."


def queue_for(follower_id: str) -> str:
    """Each follower consumes only its own queue."""
    return f"{QUEUE_PREFIX}{follower_id}"


def make_celery(broker_url: str, name: str) -> Celery:
    """A Celery app over Redis with the delivery guarantees benchfleet relies on."""
    app = Celery(name, broker=broker_url)
    app.conf.update(
        task_serializer="json",
        accept_content=["json"],
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        task_default_priority=5,
        broker_transport_options={
            "priority_steps": list(range(10)),
            "queue_order_strategy": "priority",
            "visibility_timeout": 24 * 3600,
        },
        broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=False,
        task_ignore_result=True,
        result_backend=None,
    )
    return app
