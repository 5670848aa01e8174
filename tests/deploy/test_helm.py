"""The chart installed for real: `helm install` in a single-node Kubernetes with the images built here, the leader
Ready, a follower registered with its sandbox on, a job from submit to result with its live progress streamed over
the leader's Service, `helm upgrade` keeping the data, a follower pod deleted mid-job giving one result per point,
and `helm uninstall` leaving nothing of the release behind. The values are the README's (its helm-values block).

The live progress is asserted from the windows the leader received: with the progress listener back on 127.0.0.1 (or
advertised as loopback) the follower's windows never arrive, and the test fails."""

from __future__ import annotations

import json
import subprocess
import time
from typing import Any

import httpx
import pytest
import yaml

from benchfleet.client import BenchfleetClient
from benchfleet.generate.modelgen import mlp_onnx
from tests.deploy.conftest import ROOT, Cluster, promtool_check_metrics, until

pytestmark = [pytest.mark.deploy, pytest.mark.timeout(900)]  # images built, a cluster started: minutes, not seconds

CHART = ROOT / "deploy" / "helm" / "benchfleet"
RELEASE = "bf"
LEADER = f"{RELEASE}-benchfleet-leader"
FOLLOWER_POD = f"{RELEASE}-benchfleet-follower-0"
SMALL = {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"memory": "4Gi"}}  # a 2-core node


def readme_values() -> dict[str, Any]:
    """The values.yaml the README's Kubernetes section gives (what a newcomer installs)."""
    text = (ROOT / "README.md").read_text()
    block = text[text.index("<!-- helm-values:start -->") : text.index("<!-- helm-values:end -->")]
    return yaml.safe_load(block.split("```yaml\n", 1)[1].rsplit("```", 1)[0])


README = readme_values()
ADMIN_TOKEN = README["tokens"]["admin"]


def values(tag: str, **more: Any) -> dict[str, Any]:
    """The README's values, with what this machine needs: the images built here (nothing can be pulled), requests
    that fit a 2-core node, and the volumes deleted with the release (so the test leaves nothing)."""
    return {
        **README,
        "image": {
            "leader": {"repository": "localhost/benchfleet-leader", "tag": tag},
            "follower": {"repository": "localhost/benchfleet-follower", "tag": tag},
        },
        "mongodb": {"image": f"localhost/benchfleet-perfdb:{tag}"},
        "redis": {"image": f"localhost/benchfleet-redis:{tag}"},
        "keepVolumes": False,
        "leader": {"resources": SMALL},
        "follower": {**README["follower"], "resources": SMALL},
        **more,
    }


def job_yaml(name: str, *, seconds: int, rates: list[int]) -> str:
    return yaml.safe_dump(
        {
            "name": name,
            "model": {"ref": "mlp:1"},
            "backends": ["onnxruntime"],
            "batch_sizes": [1],
            "load": {"pattern": "constant", "rate": rates, "duration": f"{seconds}s", "warmup": "1s", "allow_short": True},
        }
    )


def finished(client: BenchfleetClient, job_id: str, timeout_s: float) -> Any:
    return until(
        f"job {job_id} to end",
        lambda: (j := client.job(job_id)).state in ("succeeded", "failed", "cancelled") and j,
        timeout_s=timeout_s,
    )


def test_the_chart_installs_runs_a_job_upgrades_survives_a_follower_loss_and_uninstalls(cluster: Cluster, image_tag: str) -> None:
    helm = pytest.importorskip("helm_python", reason="helm-python-sdk (the Helm v4 engine) is not installed")
    with helm.Config(kubeconfig_path=str(cluster.kubeconfig), namespace="default") as cfg:
        started = time.monotonic()
        release = cfg.install(str(CHART), RELEASE, values(image_tag), wait="watcher", timeout=300)
        try:
            assert release["status"] == "deployed"
            print(f"helm install to all Ready: {time.monotonic() - started:.0f} s")
            _run_it(cluster, cfg, image_tag)
        finally:
            cfg.uninstall(RELEASE, wait="watcher", timeout=180, ignore_not_found=True)
    # The release's objects go at once; their pods and claims follow through the garbage collector.
    query = ("get", "all,pvc,pv,secret,networkpolicy,pdb", "-l", f"app.kubernetes.io/instance={RELEASE}", "-o", "name")
    until("helm uninstall to leave nothing", lambda: cluster.kubectl(*query).strip() == "", timeout_s=180, every_s=1)
    volumes = cluster.kubectl("get", "pv", "-o", "name").strip()
    assert volumes == "", f"the release's volumes outlived it: {volumes}"  # keepVolumes: false


def _run_it(cluster: Cluster, cfg: Any, tag: str) -> None:
    leader = cluster.json("get", "deploy", LEADER)
    assert leader["status"]["readyReplicas"] == 1
    # Started beside its database, the leader waited for it rather than exiting (a restart would count here).
    [pod] = cluster.json("get", "pod", "-l", "app.kubernetes.io/component=leader")["items"]
    assert pod["status"]["containerStatuses"][0]["restartCount"] == 0, pod["status"]
    url = cluster.forward(f"svc/{LEADER}:8700")
    with BenchfleetClient(url, token=ADMIN_TOKEN) as client:
        mine = lambda: [f for f in client.followers() if f.info.follower_id == FOLLOWER_POD]  # noqa: E731
        follower = until("the follower to register", mine, timeout_s=120)[0]
        # The agent runs as root with NET_ADMIN and SYS_ADMIN: its model servers are sandboxed, and the sandbox's
        # link can be shaped (the probe that offers tbf opens a real sandbox).
        assert "tbf" in follower.info.network_shaping and follower.info.trusted_only == [], follower.info
        client.upload_model(mlp_onnx(inputs=16, hidden=32, layers=2), name="mlp", version="1")

        first = client.submit_yaml(job_yaml("k8s-first", seconds=3, rates=[40]))
        done = finished(client, first.id, 180)
        assert done.state == "succeeded", done.error
        [point] = client.results(first.id).points
        assert point.requests > 0 and point.latency_ms is not None
        assert point.environment.image is not None and point.environment.image.endswith(f"benchfleet-follower:{tag}")
        progress = client.progress(first.id)
        windows = [w for p in progress["points"] for w in p["windows"]]
        assert progress["follower_id"] == FOLLOWER_POD and len(windows) >= 1, progress  # streamed over the Service

        # Both processes' metrics, after a real point (the follower's per-percentile gauges are set), pass promtool.
        pod_ip = cluster.kubectl("get", "pod", FOLLOWER_POD, "-o", "jsonpath={.status.podIP}")
        follower_metrics = httpx.get(cluster.forward(f"{pod_ip}:9701") + "/metrics", timeout=10).text
        assert 'benchfleet_follower_point_latency_seconds{percentile="99"}' in follower_metrics
        promtool_check_metrics(follower_metrics)
        promtool_check_metrics(httpx.get(url + "/metrics", timeout=10).text)

    # An upgrade (a changed value restarts the leader) keeps PerfDB's data and the broker's.
    cfg.upgrade(str(CHART), RELEASE, values(tag, leader={"resources": SMALL, "logFormat": "text"}), wait="watcher", timeout=300)
    with BenchfleetClient(url, token=ADMIN_TOKEN) as client:
        again = until("the upgraded leader to answer", lambda: _or_none(lambda: client.job(first.id)), timeout_s=120)
        assert again.state == "succeeded" and len(client.results(first.id).points) == 1

        # A follower pod deleted mid-job: the StatefulSet brings it back under the same name and volume; the job ends
        # with one result per point, whichever attempt delivered them.
        second = client.submit_yaml(job_yaml("k8s-follower-lost", seconds=4, rates=[20, 30]))
        until("the second job to run", lambda: client.job(second.id).state == "running", timeout_s=120, every_s=0.2)
        cluster.kubectl("delete", "pod", FOLLOWER_POD, "--wait=false")
        done = finished(client, second.id, 300)
        assert done.state == "succeeded", done.error
        points = client.results(second.id).points
        assert sorted(p.point.index for p in points) == [0, 1], [p.point for p in points]
        assert {p.point.rate for p in points} == {20, 30}


def _or_none(call: Any) -> Any:
    try:
        return call()
    except Exception:  # the forwarded Service has no ready endpoint yet: connection refused or reset
        return None


def test_the_leader_pod_is_admitted_under_the_restricted_pod_security_standard(cluster: Cluster, image_tag: str) -> None:
    """The API server's own Pod Security admission judges the chart's pods: in a namespace that enforces `restricted`,
    the leader's pod is admitted (server-side dry run) and the sandboxing follower's is refused, naming why."""
    helm = pytest.importorskip("helm_python", reason="helm-python-sdk (the Helm v4 engine) is not installed")
    with helm.Chart.load(str(CHART)) as chart:
        rendered = chart.render(values(image_tag), name=RELEASE, namespace="restricted-check")
    docs = [doc for text in rendered.values() for doc in yaml.safe_load_all(text) if doc]
    namespace = "restricted-check"
    cluster.kubectl("create", "namespace", namespace)
    try:
        cluster.kubectl("label", "namespace", namespace, "pod-security.kubernetes.io/enforce=restricted")

        def admitted(component: str) -> subprocess.CompletedProcess[str]:
            [workload] = [
                d
                for d in docs
                if d["metadata"]["name"] == f"{RELEASE}-benchfleet-{component}"
                and d["kind"] in ("Deployment", "StatefulSet", "DaemonSet")
            ]
            spec = workload["spec"]["template"]["spec"]
            claims = [
                {"name": c["metadata"]["name"], "persistentVolumeClaim": {"claimName": c["metadata"]["name"]}}
                for c in workload["spec"].get("volumeClaimTemplates", [])
            ]  # what the StatefulSet adds to its pods
            spec = {**spec, "volumes": spec.get("volumes", []) + claims}
            pod = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": f"psa-{component}", "namespace": namespace},
                "spec": spec,
            }
            manifest = cluster.dir / f"psa-{component}.json"
            manifest.write_text(json.dumps(pod))
            return cluster.sh("kubectl", str(cluster.dir), "apply", "--dry-run=server", "-f", str(manifest), check=False)

        leader = admitted("leader")
        assert leader.returncode == 0, leader.stderr
        follower = admitted("follower")
        assert follower.returncode != 0 and 'violates PodSecurity "restricted' in follower.stderr, follower.stderr
    finally:
        cluster.kubectl("delete", "namespace", namespace, "--wait=false")


def test_on_demand_mode_runs_each_job_in_a_kubernetes_job_of_its_own_that_is_gone_after(cluster: Cluster, image_tag: str) -> None:
    """No standing agent: the leader (as its ServiceAccount, through the official client) creates a Kubernetes Job for
    the submitted job; its pod registers as that job's follower, runs it with live progress, and exits; the leader
    then deletes the Job and forgets the follower."""
    helm = pytest.importorskip("helm_python", reason="helm-python-sdk (the Helm v4 engine) is not installed")
    release, leader = "bfo", "bfo-benchfleet-leader"
    on_demand = values(
        image_tag, follower={**README["follower"], "replicas": 0, "resources": SMALL}, ondemand={"enabled": True, "maxPods": 2}
    )
    with helm.Config(kubeconfig_path=str(cluster.kubeconfig), namespace="default") as cfg:
        cfg.install(str(CHART), release, on_demand, wait="watcher", timeout=300)
        try:
            url = cluster.forward(f"svc/{leader}:8700")
            with BenchfleetClient(url, token=ADMIN_TOKEN) as client:
                assert client.followers() == []  # nothing stands by, nothing holds a GPU
                client.upload_model(mlp_onnx(inputs=16, hidden=32, layers=2), name="mlp", version="1")
                job = client.submit_yaml(job_yaml("k8s-on-demand", seconds=3, rates=[40]))
                selector = f"benchfleet.io/job={job.id}"
                pods_job = until(
                    "its Kubernetes Job", lambda: cluster.json("get", "jobs", "-l", selector)["items"], timeout_s=60
                )[0]
                name = pods_job["metadata"]["name"]
                assert name == f"bf-run-{job.id[:12]}" and pods_job["spec"]["backoffLimit"] == 0
                done = finished(client, job.id, 240)
                assert done.state == "succeeded" and done.follower_id == name, done
                [point] = client.results(job.id).points
                assert point.requests > 0 and point.environment.follower_id == name
                progress = client.progress(job.id)
                assert [w for p in progress["points"] for w in p["windows"]], progress  # streamed from the pod
                until("the Job to be deleted", lambda: not cluster.json("get", "jobs", "-l", selector)["items"], timeout_s=120)
                until("its follower to be forgotten", lambda: client.followers() == [], timeout_s=60)
        finally:
            cfg.uninstall(release, wait="watcher", timeout=180, ignore_not_found=True)
    query = (
        "get",
        "all,pvc,secret,role,rolebinding,serviceaccount,configmap",
        "-l",
        f"app.kubernetes.io/instance={release}",
        "-o",
        "name",
    )
    until("helm uninstall to leave nothing", lambda: cluster.kubectl(*query).strip() == "", timeout_s=180, every_s=1)
