"""The deployment guide's (docs/deploy.md) compose blocks, run as they stand in the checkout: the deploy tools and
the images (podman; built already by the package's fixture, so all cached), MongoDB (the embedded PerfDB image, which
starts like mongo:7, with its root user), Redis with its password, the leader and a follower named follower-1 come up;
a job is submitted with the CLI and its results printed; its live progress reached the leader; the guide's `down`
stops leader and follower on SIGTERM (exit status 0, not a kill after the grace period) and leaves no container.

These machines' containers cannot have a network of their own (podman with netns=host): the block itself then adds
deploy/compose.hostnet.yml (every service on the host's network, their names mapped to loopback). The whole project
runs in a network namespace this test creates (its ports stay private, and it is removed after)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.deploy.conftest import ROOT, guide_block

pytestmark = [pytest.mark.deploy, pytest.mark.timeout(900)]  # images built, a cluster started: minutes, not seconds

COMPOSE = ROOT / ".benchfleet" / "deploy-tools" / "compose" / "bin" / "podman-compose"  # install_deploy_tools.sh
PROJECT = "benchfleet"  # docker-compose.yml's name
WRITTEN = (".env", "my-model.zip", "job.yaml", "job.txt")  # what the block writes in the checkout


def _containers(project: str) -> list[str]:
    out = subprocess.run(
        ["podman", "ps", "-a", "--filter", f"label=io.podman.compose.project={project}", "--format", "{{.Names}}"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    return out.split()


def test_the_guide_compose_path_runs_a_job_with_live_progress_and_down_stops_on_sigterm(image_tag: str, tmp_path: Path) -> None:
    pytest.importorskip("torch", reason="`models generate` in the guide's block needs the torch extra")
    if not COMPOSE.is_file():
        pytest.skip(f"podman-compose is not installed at {COMPOSE} (scripts/install_deploy_tools.sh)")
    if _containers(PROJECT):
        pytest.skip(f"a compose project named {PROJECT} already runs on this machine")
    netns = f"benchfleet-compose-{uuid.uuid4().hex[:8]}"
    kept = {name: (ROOT / name).read_bytes() for name in WRITTEN if (ROOT / name).exists()}
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BENCHFLEET_", "COMPOSE"))}
    env.update({"PATH": f"{Path(sys.executable).parent}:{env.get('PATH', '/usr/bin:/bin')}", "COLUMNS": "120"})
    inside = ["nsenter", f"--net=/run/netns/{netns}"]
    guide = guide_block("compose")

    def run(script: str, timeout: float) -> subprocess.CompletedProcess[str]:
        """In the checkout, in the test's namespace, after the guide's block's own variables (its first lines)."""
        path = tmp_path / f"step-{uuid.uuid4().hex[:6]}.sh"
        path.write_text("set -euo pipefail\n" + script)
        return subprocess.run(
            [*inside, "bash", str(path)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout, check=False
        )

    setup = "\n".join(line for line in guide.splitlines() if line.startswith(("COMPOSE=", "export BENCHFLEET_", "if grep")))
    subprocess.run(["ip", "netns", "add", netns], check=True, timeout=30)
    try:
        subprocess.run(["ip", "-n", netns, "link", "set", "lo", "up"], check=True, timeout=30)
        up = run(guide, timeout=600)
        assert up.returncode == 0, up.stdout[-3000:] + up.stderr[-3000:]
        job_id = (ROOT / "job.txt").read_text().splitlines()[0].strip()
        assert "compose-job" in up.stdout and "succeeded" in up.stdout, up.stdout[-2000:]
        assert sorted(_containers(PROJECT)) == [f"{PROJECT}_{s}_1" for s in ("follower", "leader", "mongo", "redis")]
        # Live progress: the leader listens on every interface (here every service shares loopback, so a listener
        # back on 127.0.0.1 would still be reached: the socket itself is checked), and the point's windows reached it
        # at the address it advertises (leader:8701).
        listening = run("ss -Hltn 'sport = :8701'\n", timeout=60).stdout
        assert "0.0.0.0:8701" in listening or "*:8701" in listening, listening
        check = run(
            "curl -sf -H \"Authorization: Bearer $(sed -n 's/^BENCHFLEET_ADMIN_TOKEN=//p' .env)\" "
            f"http://127.0.0.1:8700/api/v1/jobs/{job_id}/progress\n",
            timeout=60,
        )
        assert check.returncode == 0, check.stderr
        progress = json.loads(check.stdout)
        assert progress["state"] == "succeeded" and [w for p in progress["points"] for w in p["windows"]], progress
        assert progress["follower_id"] == "follower-1", progress  # the compose file's stable name, not a hash
        # The leader's environment holds PerfDB's password only inside the URI it was given; the logs never show it.
        password = next(
            line.split("=", 1)[1]
            for line in (ROOT / ".env").read_text().splitlines()
            if line.startswith("BENCHFLEET_MONGO_PASSWORD=")
        )
        logs = subprocess.run(["podman", "logs", f"{PROJECT}_leader_1"], capture_output=True, text=True, timeout=60)
        assert password not in logs.stdout + logs.stderr

        since = time.time()
        down = run(setup + "\n" + guide_block("compose-down"), timeout=300)
        assert down.returncode == 0, down.stdout[-2000:] + down.stderr[-2000:]
        assert _containers(PROJECT) == [], "compose down left containers"
        # Leader and follower ended on the SIGTERM `down` sent: exit status 0 (a kill after the grace period is 137).
        died = _exits(since)
        assert died.get(f"{PROJECT}_leader_1") == "0" and died.get(f"{PROJECT}_follower_1") == "0", died
    finally:
        run(setup + "\n$COMPOSE down -v >/dev/null 2>&1 || true\n", timeout=300)  # and the volumes: it leaves nothing
        subprocess.run(["ip", "netns", "del", netns], check=False, timeout=30)
        for name in WRITTEN:
            if name in kept:
                (ROOT / name).write_bytes(kept[name])
            else:
                (ROOT / name).unlink(missing_ok=True)
    volumes = subprocess.run(
        ["podman", "volume", "ls", "--format", "{{.Name}}"], capture_output=True, text=True, timeout=60, check=True
    ).stdout.split()
    assert not [v for v in volumes if v.startswith(f"{PROJECT}_")], volumes


def _exits(since: float) -> dict[str, str]:
    """The exit status of each container that died since `since`, from podman's own event log."""
    out = subprocess.run(
        ["podman", "events", "--stream=false", "--since", str(int(since)), "--filter", "event=died",
         "--format", "{{.Name}} {{.ContainerExitCode}}"],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout
    return dict(line.split(" ", 1) for line in out.splitlines() if " " in line)
