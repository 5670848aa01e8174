"""The newcomer's path in the README, run as it stands: `benchfleet up`, a user token, a generated model, a job
submitted with that token, results read with the CLI and the Python client, `benchfleet down`."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from benchfleet.stack import port_open

pytestmark = pytest.mark.e2e

README = Path(__file__).resolve().parents[2] / "README.md"


def _newcomer_block() -> str:
    text = README.read_text()
    block = text[text.index("<!-- newcomer:start -->"):text.index("<!-- newcomer:end -->")]
    return block.split("```sh\n", 1)[1].rsplit("```", 1)[0]


def _fleet_processes(workdir: Path) -> list[str]:
    found = []
    for proc in psutil.process_iter(["pid", "cmdline", "status"]):
        cmdline = " ".join(proc.info["cmdline"] or [])
        if str(workdir) in cmdline and proc.info["status"] != psutil.STATUS_ZOMBIE:
            found.append(f"{proc.info['pid']}: {cmdline[:150]}")
    return found


def test_the_readme_newcomer_path_runs_as_written(tmp_path: Path, artifacts_dir: Path) -> None:
    pytest.importorskip("torch", reason="`models generate` needs the torch extra (scripts/setup.sh installs it)")
    if port_open(8700) or port_open(8701):
        pytest.skip("port 8700 or 8701 (the README's leader) is taken on this machine")
    script = tmp_path / "newcomer.sh"
    script.write_text("set -euo pipefail\n" + _newcomer_block())
    env = {k: v for k, v in os.environ.items() if not k.startswith("BENCHFLEET_")}
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '/usr/bin:/bin')}"
    env["COLUMNS"] = "100"
    run = None
    try:
        run = subprocess.run(["bash", str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    finally:
        shown = f"{run.stdout}\n--- stderr ---\n{run.stderr}" if run is not None else "did not finish in 600 s"
        (artifacts_dir / "newcomer-output.txt").write_text(shown)
        subprocess.run([str(Path(sys.executable).parent / "benchfleet"), "down"], cwd=tmp_path, env=env,
                       capture_output=True, timeout=120, check=False)  # fmt: skip
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    out = run.stdout
    assert "fleet up: leader http://127.0.0.1:8700" in out
    assert "my-model:1" in out and "my-first-job" in out and "succeeded" in out
    job_id = (tmp_path / "my-job.txt").read_text().splitlines()[0].strip()
    assert re.fullmatch(r"[0-9a-f]{32}", job_id)
    # The Python client's lines: one per point, each with its p99.
    client_lines = re.findall(r"^onnxruntime (1|4) p99 [0-9.]+ ms (True|False)$", out, re.M)
    assert sorted(b for b, _ in client_lines) == ["1", "4"], out[-2000:]
    assert "fleet stopped" in out
    token = (tmp_path / ".benchfleet/fleet/admin-token").read_text().strip()
    assert token not in out + run.stderr  # the admin token is read from its file, never printed
    assert _fleet_processes(tmp_path) == [], "benchfleet down left processes running"
    assert not port_open(8700)
