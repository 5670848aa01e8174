"""A user's own PyTorch model through the whole system, from the CLI: pushed as TorchScript with its signature and tags,
found by a search, benchmarked on ONNX Runtime (the follower converts it in the model sandbox and checks it against
the original), the check shown by the CLI and on the point page; then the job deleted with all its data."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.e2e.test_walking_skeleton import _wait_done

pytestmark = pytest.mark.e2e

torch = pytest.importorskip("torch", reason="PyTorch is not installed (pip install 'benchfleet[torch]')")


def _cli(fleet, *args: str) -> subprocess.CompletedProcess[str]:  # type: ignore[no-untyped-def]
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "BENCHFLEET_URL": fleet.url,
        "BENCHFLEET_TOKEN": fleet.admin_token,
        "PYTHONPATH": os.environ.get("PYTHONPATH", ""),
        "COLUMNS": "200",
        "TERM": "dumb",
    }
    argv = [sys.executable, "-m", "benchfleet", *args]
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120, check=False)


@pytest.mark.timeout(300)
def test_a_users_torchscript_model_is_converted_checked_benchmarked_and_deleted(fleet, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    torch.manual_seed(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)).eval()
    path = tmp_path / "mine.pt"
    torch.jit.trace(mlp, torch.randn(1, 16)).save(str(path))
    signature = {
        "inputs": [{"name": "input", "datatype": "FP32", "shape": [-1, 16]}],
        "outputs": [{"name": "output", "datatype": "FP32", "shape": [-1, 4]}],
    }
    described = ["--signature", json.dumps(signature), "--description", "my own classifier", "--tag", "pytorch"]
    pushed = _cli(fleet, "models", "push", str(path), "--name", "mine", "--version", "1", "--format", "torchscript", *described)
    assert pushed.returncode == 0, pushed.stderr
    found = _cli(fleet, "models", "ls", "--tag", "pytorch", "--format", "torchscript", "--json")
    assert found.returncode == 0, found.stderr
    listed = [(m["name"], m["description"], m["tags"]) for m in json.loads(found.stdout)]
    assert listed == [("mine", "my own classifier", ["pytorch"])]

    fleet.start_follower("f-user-model")
    with fleet.client() as client:
        job = client.submit_yaml("""
name: my-model-on-ort
model: {ref: "mine:1"}
backends: [onnxruntime]
batch_sizes: [1, 4]
load: {allow_short: true, pattern: poisson, rate: 50, duration: 2s, warmup: 500ms}
""")
        results = _wait_done(client, job.id, timeout_s=240)
    assert [p.point.batch_size for p in results.points] == [1, 4]
    for point in results.points:
        conversion = point.conversion
        assert conversion is not None and conversion.passed and conversion.sandboxed
        assert (conversion.source, conversion.target) == ("torchscript", "onnx")
        assert point.ok > 0 and point.errors == 0
    shown = _cli(fleet, "results", job.id)
    assert shown.returncode == 0, shown.stderr
    assert "onnxruntime served the model converted torchscript -> onnx in" in shown.stdout
    assert "agrees with the original on 4 samples" in shown.stdout
    with httpx.Client(base_url=fleet.url) as browser:
        assert browser.post("/login", data={"token": fleet.admin_token, "next": "/"}).status_code in (200, 303)
        page = browser.get(f"/jobs/{job.id}/points/0").text
    assert 'id="conversion"' in page and "agrees with the original" in page

    dry = _cli(fleet, "delete", job.id, "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    held = json.loads(dry.stdout)
    assert held["deleted"] is False and held["kinds"]["results"]["documents"] == 2
    gone = _cli(fleet, "delete", job.id)
    assert gone.returncode == 0 and "deleted: job" in gone.stdout and job.id in gone.stdout, gone.stdout + gone.stderr
    assert _cli(fleet, "results", job.id).returncode != 0
