"""The README's compose blocks, run as they stand with podman-compose and the images built here: MongoDB (the
embedded PerfDB image, which starts like mongo:7, with its root user), Redis with its password, the leader and a
follower come up; a job is submitted with the CLI and its results printed; its live progress reached the leader; and
the README's `down` leaves no container running.

These machines' containers cannot have a network of their own (podman with netns=host), so the project's
deploy/compose.hostnet.yml override puts every service on the host's network with their names mapped to loopback,
and the whole project runs in a network namespace this test creates (its ports stay private, and it is removed
after)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.deploy.conftest import ROOT

pytestmark = [pytest.mark.deploy, pytest.mark.timeout(900)]  # images built, a cluster started: minutes, not seconds

COMPOSE = ROOT / ".benchfleet" / "deploy-tools" / "compose" / "bin" / "podman-compose"  # install_deploy_tools.sh


def _block(name: str) -> str:
    text = (ROOT / "README.md").read_text()
    block = text[text.index(f"<!-- {name}:start -->") : text.index(f"<!-- {name}:end -->")]
    return block.split("```sh\n", 1)[1].rsplit("```", 1)[0]


def _containers(project: str) -> list[str]:
    out = subprocess.run(
        ["podman", "ps", "-a", "--filter", f"label=io.podman.compose.project={project}", "--format", "{{.Names}}"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    return out.split()


def test_the_readme_compose_path_runs_a_job_with_live_progress_and_down_leaves_nothing(image_tag: str, tmp_path: Path) -> None:
    pytest.importorskip("torch", reason="`models generate` in the README block needs the torch extra")
    if not COMPOSE.is_file():
        pytest.skip(f"podman-compose is not installed at {COMPOSE} (scripts/install_deploy_tools.sh)")
    project = f"bfc{uuid.uuid4().hex[:8]}"
    netns = f"benchfleet-{project}"
    (tmp_path / "deploy").mkdir()
    shutil.copy(ROOT / "docker-compose.yml", tmp_path)
    shutil.copy(ROOT / "deploy" / "compose.hostnet.yml", tmp_path / "deploy")
    env = {k: v for k, v in os.environ.items() if not k.startswith("BENCHFLEET_")}
    env.update(
        {
            "PATH": f"{Path(sys.executable).parent}:{env.get('PATH', '/usr/bin:/bin')}",
            "COLUMNS": "120",
            "COMPOSE": str(COMPOSE),
            "COMPOSE_FILE": "docker-compose.yml:deploy/compose.hostnet.yml",
            "COMPOSE_PROJECT_NAME": project,
            "BENCHFLEET_TAG": image_tag,  # the images scripts/build_images.sh built (nothing is built or pulled here)
            "BENCHFLEET_MONGO_IMAGE": f"localhost/benchfleet-perfdb:{image_tag}",
            "BENCHFLEET_REDIS_IMAGE": f"localhost/benchfleet-redis:{image_tag}",
        }
    )
    inside = ["nsenter", f"--net=/run/netns/{netns}"]

    def run(script: str, timeout: float) -> subprocess.CompletedProcess[str]:
        path = tmp_path / f"step-{uuid.uuid4().hex[:6]}.sh"
        path.write_text("set -euo pipefail\n" + script)
        return subprocess.run(
            [*inside, "bash", str(path)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=timeout, check=False
        )

    subprocess.run(["ip", "netns", "add", netns], check=True, timeout=30)
    try:
        subprocess.run(["ip", "-n", netns, "link", "set", "lo", "up"], check=True, timeout=30)
        up = run(_block("compose"), timeout=600)
        assert up.returncode == 0, up.stdout[-3000:] + up.stderr[-3000:]
        job_id = (tmp_path / "job.txt").read_text().splitlines()[0].strip()
        assert "compose-job" in up.stdout and "succeeded" in up.stdout, up.stdout[-2000:]
        assert sorted(_containers(project)) == [f"{project}_{s}_1" for s in ("follower", "leader", "mongo", "redis")]
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
        # The leader's environment holds PerfDB's password only inside the URI it was given; the logs never show it.
        password = next(
            line.split("=", 1)[1]
            for line in (tmp_path / ".env").read_text().splitlines()
            if line.startswith("BENCHFLEET_MONGO_PASSWORD=")
        )
        logs = subprocess.run(["podman", "logs", f"{project}_leader_1"], capture_output=True, text=True, timeout=60)
        assert password not in logs.stdout + logs.stderr

        down = run(_block("compose-down"), timeout=300)
        assert down.returncode == 0, down.stdout[-2000:] + down.stderr[-2000:]
        assert _containers(project) == [], "compose down left containers"
    finally:
        run("$COMPOSE down -v >/dev/null 2>&1 || true\n", timeout=300)  # and the volumes: this test leaves nothing
        subprocess.run(["ip", "netns", "del", netns], check=False, timeout=30)
    volumes = subprocess.run(
        ["podman", "volume", "ls", "--format", "{{.Name}}"], capture_output=True, text=True, timeout=60, check=True
    ).stdout.split()
    assert not [v for v in volumes if v.startswith(project)], volumes
