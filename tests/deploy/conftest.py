"""Real deployments: the images built here with podman, a real single-node Kubernetes from the kit in ../shared/k8s
(apiserver, scheduler, controller-manager, kubelet, containerd), the chart installed with the real Helm engine.

Everything a test starts is stopped in a `finally`: the cluster's `down` stops exactly what its `up` started."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest

ROOT = Path(__file__).resolve().parents[2]
KIT = Path(os.environ.get("K8S_KIT", ROOT.parent / "shared" / "k8s"))
T = TypeVar("T")


def until(what: str, probe: Callable[[], T | None], *, timeout_s: float, every_s: float = 0.5) -> T:
    """Poll `probe` until it returns something truthy (readiness, never a bare sleep); fail naming `what`."""
    deadline = time.monotonic() + timeout_s
    while True:
        got = probe()
        if got:
            return got
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout_s:g} s waiting for {what}")
        time.sleep(every_s)


PROMTOOL = ROOT / ".benchfleet" / "deploy-tools" / "bin" / "promtool"  # scripts/install_deploy_tools.sh


def promtool_check_metrics(exposition: str) -> None:
    """`promtool check metrics` on an exposition: it must be clean (no lint finding, no error)."""
    if not PROMTOOL.is_file():
        pytest.skip(f"promtool is not installed at {PROMTOOL} (scripts/install_deploy_tools.sh)")
    done = subprocess.run(
        [str(PROMTOOL), "check", "metrics"], input=exposition, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0 and not done.stdout.strip() and not done.stderr.strip(), done.stdout + done.stderr


GUIDE = ROOT / "docs" / "deploy.md"  # the deployment guide the README links to


def guide_block(name: str) -> str:
    """The guide's shell block between `<!-- name:start -->` and `<!-- name:end -->`, as a user copies it."""
    text = GUIDE.read_text()
    block = text[text.index(f"<!-- {name}:start -->") : text.index(f"<!-- {name}:end -->")]
    return block.split("```sh\n", 1)[1].rsplit("```", 1)[0]


def _kit_or_skip() -> Path:
    if not (KIT / "cluster.sh").is_file():
        pytest.skip(f"the Kubernetes kit is not on this machine ({KIT}/cluster.sh; set K8S_KIT)")
    if shutil.which("podman") is None:
        pytest.skip("podman is not installed (scripts/test.sh installs it with the kit: cluster.sh deps)")
    return KIT


IMAGES = ("leader", "follower", "redis", "perfdb")


@pytest.fixture(scope="package")
def image_tag() -> Iterator[str]:
    """The images of this checkout (scripts/build_images.sh: leader, CPU follower, Redis, embedded PerfDB, tagged with
    the package's version as the guide builds them), built once per run of tests/deploy; podman's layer cache makes a
    rebuild of unchanged code quick. Removed when the package's tests end (their cached layers stay) unless
    BENCHFLEET_KEEP_IMAGES=1 asks to keep them: removed at the session's end, they and the cluster's `down` added ~20 s
    to the end of a two-worker run, beside nothing."""
    _kit_or_skip()
    started = time.monotonic()
    done = subprocess.run(
        ["bash", str(ROOT / "scripts" / "build_images.sh")],  # the guide's own call: the version's tag
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    print(f"images built in {time.monotonic() - started:.0f} s:\n{done.stderr}")
    tag = done.stdout.strip().splitlines()[-1]
    yield tag
    if os.environ.get("BENCHFLEET_KEEP_IMAGES") != "1":
        names = [f"localhost/benchfleet-{name}:{tag}" for name in IMAGES]
        subprocess.run(["podman", "rmi", "--ignore", *names], capture_output=True, timeout=300, check=False)


@dataclass
class Cluster:
    dir: Path
    kubeconfig: Path
    forwards: dict[str, str] = field(default_factory=dict)

    def sh(self, *args: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            ["bash", str(KIT / "cluster.sh"), *args], capture_output=True, text=True, timeout=timeout, check=False
        )
        if check:
            assert done.returncode == 0, f"cluster.sh {' '.join(args)}: {done.stderr[-2000:]}"
        return done

    def shell(self, script: str, *, timeout: float) -> subprocess.CompletedProcess[str]:
        """`script` in bash at the checkout's root, after `eval "$(cluster.sh env DIR)"` as the guide says (kubectl and
        KUBECONFIG for this cluster), with the project's environment first on PATH (its `benchfleet`, as after
        `source .venv/bin/activate`). In a session of its own, ended when bash exits: what the script left running in
        the background (the guide's `kubectl port-forward ... &`) goes with it. Output goes through files, which a
        background child holding them open cannot stall."""
        prelude = f'set -euo pipefail\neval "$(bash {KIT}/cluster.sh env {self.dir})"\n'
        env = {k: v for k, v in os.environ.items() if not k.startswith("BENCHFLEET_")}
        env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '/usr/bin:/bin')}"
        env["COLUMNS"] = "120"
        with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
            proc = subprocess.Popen(
                ["bash", "-c", prelude + script], cwd=ROOT, env=env, stdout=out, stderr=err, start_new_session=True
            )
            try:
                code = proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                code = -1
            finally:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
                proc.wait()
            out.seek(0)
            err.seek(0)
            stderr = err.read() + (f"\n[timed out after {timeout:g} s]" if code == -1 else "")
            return subprocess.CompletedProcess(proc.args, code, out.read(), stderr)

    def kubectl(self, *args: str, timeout: float = 120, check: bool = True) -> str:
        return self.sh("kubectl", str(self.dir), *args, timeout=timeout, check=check).stdout

    def json(self, *args: str) -> Any:
        import json

        return json.loads(self.kubectl(*args, "-o", "json"))

    def forward(self, target: str) -> str:
        """http://127.0.0.1:PORT on the host to `target` (svc/NAME:PORT: its ClusterIP, which outlives the pods behind
        it) inside the cluster's network namespace. The kit's forwarder runs until the cluster's `down`; one per
        target."""
        if target not in self.forwards:
            line = self.sh("forward", str(self.dir), target, "0").stdout
            found = re.search(r"127\.0\.0\.1:(\d+)", line)
            assert found, f"cluster.sh forward printed {line!r}"
            self.forwards[target] = f"http://127.0.0.1:{found.group(1)}"
        return self.forwards[target]


@pytest.fixture(scope="package")
def cluster(tmp_path_factory: pytest.TempPathFactory, image_tag: str) -> Iterator[Cluster]:
    """A real single-node Kubernetes with this checkout's images loaded; `down` in any case."""
    kit = _kit_or_skip()
    where = tmp_path_factory.mktemp("k8s")
    try:
        started = time.monotonic()
        up = subprocess.run(
            ["bash", str(kit / "cluster.sh"), "up", str(where)], capture_output=True, text=True, timeout=600, check=False
        )
        assert up.returncode == 0, up.stderr[-3000:]
        info = dict(line.split("=", 1) for line in up.stdout.splitlines() if "=" in line)
        cluster = Cluster(where, Path(info["KUBECONFIG"]))
        assert f":{image_tag}" in guide_block("helm-images"), "the guide loads another version's images"
        loaded = cluster.shell(guide_block("helm-images"), timeout=900)  # the guide's step 1: build (cached) and load
        assert loaded.returncode == 0, loaded.stdout[-2000:] + loaded.stderr[-3000:]
        print(f"cluster up and the guide's images built and loaded in {time.monotonic() - started:.0f} s")
        yield cluster
    finally:
        subprocess.run(["bash", str(kit / "cluster.sh"), "down", str(where)], capture_output=True, timeout=300, check=False)
