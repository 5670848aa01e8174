"""The on-demand launcher against a real leader and PerfDB, the Kubernetes API faked at its seam (KubeJobs): a queued
job gets its Kubernetes Job and is pinned to the pod's follower id; the pod's follower is kept while its Kubernetes
Job stands; when the job ends the Kubernetes Job is deleted and the follower forgotten, and a pod still stopping that
registers again afterwards is forgotten on the next tick (CI once saw such a ghost outlive its pod). A standing
follower is never touched."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from pymongo import AsyncMongoClient

from leader.placement.ondemand import LABEL_MANAGED, MANAGER, Launcher, follower_id_for
from leader.store.followers import Beats
from tests.integration.leader.conftest import ADMIN, Leader

TEMPLATE: dict[str, Any] = {
    "apiVersion": "batch/v1",
    "kind": "Job",
    "spec": {"template": {"spec": {"containers": [{"name": "follower", "image": "benchfleet-follower:test"}]}}},
}


class Kube:
    """The API server's Jobs in one namespace, as the launcher sees them."""

    def __init__(self) -> None:
        self.jobs: dict[str, dict[str, Any]] = {}
        self.deleted: list[str] = []

    def create(self, manifest: dict[str, Any]) -> None:
        assert manifest["metadata"]["labels"][LABEL_MANAGED] == MANAGER
        self.jobs[manifest["metadata"]["name"]] = manifest

    def managed(self) -> list[dict[str, Any]]:
        return list(self.jobs.values())

    def delete(self, name: str) -> None:
        self.deleted.append(name)
        del self.jobs[name]


def tick(leader: Leader, kube: Kube, beats: Beats) -> None:
    async def once() -> None:
        client: AsyncMongoClient = AsyncMongoClient(leader.settings.mongo_uri)
        try:
            launcher = Launcher(
                db=client[leader.settings.db_name],
                kube=kube,
                template=TEMPLATE,
                queue=None,
                max_pods=2,
                interval_s=1.0,
                on_pinned=lambda: None,
                on_forgotten=beats.forget,
            )
            await launcher.tick()
        finally:
            await client.close()

    asyncio.run(once())


def registered(leader: Leader) -> set[str]:
    response = leader.client.get("/api/v1/followers", headers=ADMIN)
    assert response.status_code == 200, response.text
    return {f["info"]["follower_id"] for f in response.json()}


def test_the_launcher_forgets_an_on_demand_follower_whenever_it_shows_up_without_its_kubernetes_job(leader: Leader) -> None:
    leader.upload_model()
    job_id = leader.submit()["id"]
    pod = follower_id_for(job_id)
    kube = Kube()
    beats = Beats()  # the leader's memory of the followers' last beats: what the launcher forgets goes from it too
    leader.register("gpu-a", backends=["triton"])  # standing, and unable to take the job

    tick(leader, kube, beats)
    assert list(kube.jobs) == [pod]
    assert leader.job(job_id)["spec"]["requires"]["follower"] == pod

    leader.register(pod)  # the pod started and joined
    ghost = follower_id_for(uuid.uuid4().hex)
    leader.register(ghost)  # an on-demand follower whose Kubernetes Job is gone
    for follower in ("gpu-a", pod, ghost):
        beats.wrote(follower, "i", {})
    tick(leader, kube, beats)
    assert registered(leader) == {"gpu-a", pod}
    assert kube.deleted == []
    assert [beats.current(f, "i", {}, 60.0) for f in ("gpu-a", pod, ghost)] == [True, True, False]

    response = leader.client.post(f"/api/v1/jobs/{job_id}/cancel", headers=ADMIN)
    assert response.status_code == 200, response.text
    leader.wait_state(job_id, "cancelled")
    tick(leader, kube, beats)
    assert kube.deleted == [pod] and registered(leader) == {"gpu-a"}
    assert [beats.current(f, "i", {}, 60.0) for f in ("gpu-a", pod)] == [True, False]

    leader.register(pod)  # its last heartbeat, sent while the pod stopped, registered it again
    tick(leader, kube, beats)
    assert registered(leader) == {"gpu-a"}
    assert kube.jobs == {}
