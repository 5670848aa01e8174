"""Benchmarks as on-demand Kubernetes pods: in this mode each queued job gets a Kubernetes Job of its own, whose pod
is a follower for that one job, holding its GPU only while it runs (and carrying a Kueue queue label when one is
configured, so a shared cluster's quota admits it).

The rest of the path is unchanged: the launcher pins the job to the pod's follower id (a conditional update, so a job
is launched once), the pod registers, the placer assigns the job to it, the agent runs it with live progress and
reports, and exits after that one job (`exit_after_job`). The launcher then deletes the Kubernetes Job and forgets
the follower, again on every tick while the follower shows up without its Kubernetes Job (a pod still stopping may
register once more). A pod that fails before its job ends fails the job, naming the pod's reason. Launches go shortest job
first and at most `max_pods` at once; the Kubernetes scheduler (or Kueue) decides when each pod starts.

The pod's shape (image, the follower's settings and Secret references, security context, resources, GPUs, node
selection) is a batch/v1 Job template the Helm chart renders; the leader adds only the name, labels and follower id.
The leader talks to the API server with the official client, as the ServiceAccount the chart binds to a Role that
may create, read and delete Jobs in its namespace, nothing more."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import yaml
from pymongo.asynchronous.database import AsyncDatabase

from common.errors import Conflict, NotFound
from common.wire.jobs import TERMINAL_STATES
from leader.clock import utcnow
from leader.store import assignments as assignments_store
from leader.store import followers as followers_store
from leader.store import jobs as jobs_store

log = logging.getLogger(__name__)

PREFIX = "bf-run-"  # a pod's follower id and its Kubernetes Job's name: bf-run-<first 12 of the job id>
LABEL_JOB = "benchfleet.io/job"
LABEL_MANAGED = "app.kubernetes.io/managed-by"
MANAGER = "benchfleet-leader"
KUEUE_LABEL = "kueue.x-k8s.io/queue-name"
NAMESPACE_FILE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


class KubeJobs(Protocol):
    """What the launcher asks of the API server (the official client in production; a real cluster in tests)."""

    def create(self, manifest: dict[str, Any]) -> None: ...
    def managed(self) -> list[dict[str, Any]]: ...
    def delete(self, name: str) -> None: ...


def follower_id_for(job_id: str) -> str:
    return f"{PREFIX}{job_id[:12]}"


def job_manifest(template: dict[str, Any], *, job_id: str, queue: str | None) -> dict[str, Any]:
    """The template made into one job's Kubernetes Job: its name, labels and the pod's follower id; one try, no
    restart (a failed benchmark is reported, not silently repeated), cleaned up by the launcher (and a TTL after)."""
    manifest = copy.deepcopy(template)
    name = follower_id_for(job_id)
    labels = {LABEL_JOB: job_id, LABEL_MANAGED: MANAGER, **({KUEUE_LABEL: queue} if queue else {})}
    meta = manifest.setdefault("metadata", {})
    meta["name"] = name
    meta["labels"] = {**(meta.get("labels") or {}), **labels}
    spec = manifest.setdefault("spec", {})
    spec.update({"backoffLimit": 0, "ttlSecondsAfterFinished": 600})
    if queue:
        spec["suspend"] = True  # Kueue admits it (unsuspends) when the queue's quota allows
    pod = spec.setdefault("template", {})
    pod_meta = pod.setdefault("metadata", {})
    pod_meta["labels"] = {**(pod_meta.get("labels") or {}), LABEL_JOB: job_id}
    pod_spec = pod.setdefault("spec", {})
    pod_spec["restartPolicy"] = "Never"
    for container in pod_spec.get("containers", [])[:1]:
        container["env"] = [e for e in container.get("env") or [] if e.get("name") != "BENCHFLEET_FOLLOWER_FOLLOWER_ID"]
        container["env"] += [
            {"name": "BENCHFLEET_FOLLOWER_FOLLOWER_ID", "value": name},
            {"name": "BENCHFLEET_FOLLOWER_EXIT_AFTER_JOB", "value": "true"},
        ]
    return manifest


def failure(kube_job: dict[str, Any]) -> str | None:
    """Why a Kubernetes Job ended (it failed, or its pod exited), or None while it runs. Asked only of a Job whose
    benchmark job has not ended: a pod that exits normally does so after its job's finish was acknowledged."""
    for condition in (kube_job.get("status") or {}).get("conditions") or []:
        if condition.get("status") != "True":
            continue
        if condition.get("type") == "Failed":
            return f"{condition.get('reason', 'Failed')}: {condition.get('message', '')}".strip(": ")
        if condition.get("type") == "Complete":
            return "the pod exited before its job ended"
    return None


class Launcher:
    """The loop that launches queued jobs as Kubernetes Jobs and reaps the Jobs whose benchmark job ended."""

    def __init__(
        self,
        *,
        db: AsyncDatabase,
        kube: KubeJobs,
        template: dict[str, Any],
        queue: str | None,
        max_pods: int,
        interval_s: float,
        on_pinned: Callable[[], None],
        on_forgotten: Callable[[str], None],
    ) -> None:
        self._db, self._kube, self._template = db, kube, template
        self._queue, self._max_pods, self._interval_s, self._on_pinned = queue, max_pods, interval_s, on_pinned
        self._on_forgotten = on_forgotten  # a follower this launcher forgot (the leader's memory of its beats goes too)

    async def run(self) -> None:
        while True:
            try:
                await self.tick()
            except Exception:  # the API server or PerfDB away for a moment: the next tick tries again
                log.exception("on-demand launcher tick failed")
            await asyncio.sleep(self._interval_s)

    async def tick(self) -> None:
        live = await self._reap()
        room = self._max_pods - live
        if room <= 0:
            return
        for job_id in await assignments_store.launchable(self._db, limit=room):
            follower_id = follower_id_for(job_id)
            launch = {"follower_id": follower_id, "kube_job": follower_id, "launched_at": utcnow()}
            if not await jobs_store.pin_queued(self._db, job_id=job_id, follower_id=follower_id, launch=launch):
                continue
            try:
                await asyncio.to_thread(self._kube.create, job_manifest(self._template, job_id=job_id, queue=self._queue))
            except Exception as exc:  # refused by the API server (RBAC, quota, a bad template): the job says why
                await self._fail(job_id, f"its Kubernetes Job could not be created: {_said(exc)}")
                continue
            log.info("job %s: launched Kubernetes Job %s", job_id, follower_id)
            self._on_pinned()

    async def _reap(self) -> int:
        """Delete the Kubernetes Jobs whose benchmark job ended (and forget their followers); fail the benchmark job
        of a pod that failed; forget every on-demand follower left without a Kubernetes Job (a pod still stopping
        may have registered again after it was forgotten). Returns how many launched pods still work."""
        live = 0
        kube_jobs = await asyncio.to_thread(self._kube.managed)
        standing = {kube_job["metadata"]["name"] for kube_job in kube_jobs}
        for view in await followers_store.list_followers(self._db):
            follower_id = view.info.follower_id
            if follower_id.startswith(PREFIX) and follower_id not in standing:
                await self._forget(follower_id)
        for kube_job in kube_jobs:
            name = kube_job["metadata"]["name"]
            job_id = (kube_job["metadata"].get("labels") or {}).get(LABEL_JOB, "")
            try:
                job = await jobs_store.get_job(self._db, job_id=job_id)
            except NotFound:  # a Job whose benchmark job is gone: nothing waits for it
                job = None
            if job is None or job.state in TERMINAL_STATES:
                await asyncio.to_thread(self._kube.delete, name)
                await self._forget(name)
                continue
            why = failure(kube_job)
            if why is not None:
                await self._fail(job_id, f"its pod failed before the job ended ({name}: {why})")
                continue
            live += 1
        return live

    async def _forget(self, follower_id: str) -> None:
        with contextlib.suppress(NotFound):  # never registered (its pod failed first), or already forgotten
            await followers_store.remove(self._db, follower_id=follower_id)
        self._on_forgotten(follower_id)

    async def _fail(self, job_id: str, reason: str) -> None:
        try:
            await jobs_store.fail_job(self._db, job_id=job_id, reason=reason)
            log.warning("job %s failed: %s", job_id, reason)
        except Conflict:
            pass  # it ended meanwhile, on its own


def _said(exc: Exception) -> str:
    body = getattr(exc, "body", None)
    return f"{getattr(exc, 'status', '')} {body or exc}".strip()[:500]


class ClusterJobs:
    """KubeJobs over the official Kubernetes client, in one namespace."""

    def __init__(self, namespace: str | None = None) -> None:
        from kubernetes import client, config

        try:
            config.load_incluster_config()
        except config.ConfigException:
            config.load_kube_config()  # outside a cluster: $KUBECONFIG (development)
        self._batch = client.BatchV1Api()
        self._client = self._batch.api_client
        self.namespace = namespace or (NAMESPACE_FILE.read_text().strip() if NAMESPACE_FILE.is_file() else "default")

    def create(self, manifest: dict[str, Any]) -> None:
        self._batch.create_namespaced_job(self.namespace, manifest)

    def managed(self) -> list[dict[str, Any]]:
        found = self._batch.list_namespaced_job(self.namespace, label_selector=f"{LABEL_MANAGED}={MANAGER}")
        return [self._client.sanitize_for_serialization(item) for item in found.items]

    def delete(self, name: str) -> None:
        from kubernetes.client.exceptions import ApiException

        try:
            self._batch.delete_namespaced_job(name, self.namespace, propagation_policy="Background")
        except ApiException as exc:
            if exc.status != 404:
                raise


def load_template(path: Path) -> dict[str, Any]:
    """The chart's Job template (YAML, a batch/v1 Job); ValueError naming the file when it is not one."""
    doc = yaml.safe_load(path.read_text())
    if not isinstance(doc, dict) or doc.get("kind") != "Job" or not (doc.get("spec") or {}).get("template"):
        raise ValueError(f"ondemand_template: {path} is not a batch/v1 Job with a pod template")
    return doc
