"""Model servers run sandboxed: as nobody, with a scrubbed environment, seeing only their files, calling no one.

The attack from the hardening issue is replayed for real: a TorchScript model whose forward() reads a host file with
torch.from_file. Unsandboxed (an admin-trusted model on a follower without the sandbox) it reads the file, which
proves the probe works; sandboxed the file is not there. Where this host cannot sandbox, the isolation tests skip
with the reason and the refusal tests still run.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from common.procs import http_ready
from common.wire.models import ModelMeta, TensorSpec
from follower.backends import get_backend
from follower.host import sandbox as sandboxes
from follower.protocols import infer_url

pytestmark = pytest.mark.integration
torch = pytest.importorskip("torch", reason="the torch extra is not installed (scripts/setup.sh installs it)")

SUPPORT = sandboxes.support()
needs_sandbox = pytest.mark.skipif(not SUPPORT.ok, reason=f"this host cannot sandbox model servers: {SUPPORT.reason}")


@pytest.fixture
def box(tmp_path: Path) -> Iterator[sandboxes.Sandbox]:
    sandbox = sandboxes.Sandbox.open(tmp_path / "work")
    sandbox.allow_read([Path(sys.prefix), Path(sys.base_prefix)])
    try:
        yield sandbox
    finally:
        sandbox.close()
        assert not Path(f"/run/netns/{sandbox.netns}").exists()


def _run_inside(box: sandboxes.Sandbox, code: str, env: dict[str, str] | None = None) -> dict[str, object]:
    done = subprocess.run(box.command([sys.executable, "-c", code]), env=env or sandboxes.server_environment(),
                          capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout))


@needs_sandbox
def test_the_server_is_nobody_without_capabilities_or_secrets(box: sandboxes.Sandbox, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    secret = tmp_path / "credential-f1"
    secret.write_text("follower credential")
    monkeypatch.setenv("BENCHFLEET_FOLLOWER_TOKEN", "join-token-that-must-stay-out")
    code = f"""
import json, os
def readable(p):
    try:
        open(p).read(); return True
    except OSError:
        return False
def writable(p):
    try:
        open(p, "w").write("x"); return True
    except OSError:
        return False
status = open("/proc/self/status").read()
print(json.dumps({{
    "uid": os.getuid(), "euid": os.geteuid(), "gid": os.getgid(),
    "cap_eff": status.split("CapEff:")[1].split()[0], "cap_bnd": status.split("CapBnd:")[1].split()[0],
    "env": sorted(os.environ),
    "secret": readable({str(secret)!r}), "host_passwd": open("/etc/passwd").read().count("\\n"),
    "workdir_writable": writable({str(box.workdir / "planted")!r}),
    "home_writable": writable(os.path.join(os.environ["HOME"], "ok")),
    "pids": len([p for p in os.listdir("/proc") if p.isdigit()]),
}}))
"""
    seen = _run_inside(box, code, env=sandboxes.server_environment())
    assert (seen["uid"], seen["euid"], seen["gid"]) == (sandboxes.NOBODY,) * 3
    assert seen["cap_eff"] == seen["cap_bnd"] == "0000000000000000"
    assert not any(name.startswith("BENCHFLEET") for name in seen["env"])  # type: ignore[attr-defined]
    assert seen["secret"] is False  # outside its work directory: not there at all
    assert seen["host_passwd"] == 2  # the sandbox's own /etc/passwd (root and nobody), not the host's
    assert seen["workdir_writable"] is False and seen["home_writable"] is True
    assert seen["pids"] <= 3  # its own PID namespace: bubblewrap's init, the server, nothing of the host


@needs_sandbox
def test_the_server_answers_the_follower_but_reaches_nothing_on_the_host(box: sandboxes.Sandbox) -> None:
    # Two listeners on the host, like Redis (loopback) and a service on every address.
    listeners = []
    for address in ("127.0.0.1", "0.0.0.0"):  # noqa: S104 - the point: even a wildcard listener stays out of reach
        sock = socket.socket()
        sock.bind((address, 0))
        sock.listen()
        listeners.append(sock)
    loopback_port, wildcard_port = (s.getsockname()[1] for s in listeners)
    code = f"""
import json, socket
def connect(host, port):
    try:
        socket.create_connection((host, port), timeout=1.5).close(); return "connected"
    except OSError as exc:
        return type(exc).__name__ + " " + str(exc.errno)
print(json.dumps({{"loopback": connect("127.0.0.1", {loopback_port}), "veth": connect({box.peer!r}, {wildcard_port}),
                   "outside": connect("10.0.0.1", {wildcard_port})}}))
"""
    try:
        seen = _run_inside(box, code)
    finally:
        for sock in listeners:
            sock.close()
    assert seen["loopback"] == "ConnectionRefusedError 111"  # its loopback is its own: the host's Redis is not there
    assert seen["veth"] == "TimeoutError None"  # the host's firewall drops what the sandbox opens
    assert seen["outside"] == "OSError 101"  # no route anywhere else (ENETUNREACH)

    # The other way works: a server inside, listening on the sandbox's address, answers the follower.
    argv = box.command([sys.executable, "-m", "http.server", "8000", "--bind", box.host])
    server = subprocess.Popen(argv, env=sandboxes.server_environment(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        ready, deadline = http_ready(f"http://{box.host}:8000/"), time.monotonic() + 30
        while not ready():
            assert server.poll() is None and time.monotonic() < deadline, "the sandboxed server never answered"
            time.sleep(0.05)
    finally:
        server.terminate()
        server.wait(timeout=10)


class Leak(torch.nn.Module):  # type: ignore[misc]
    """forward() reads a host file with torch.from_file and adds up its bytes: the issue's attack."""

    def __init__(self, path: str, size: int) -> None:
        super().__init__()
        self.path = path
        self.size = size

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        data = torch.from_file(self.path, False, self.size, dtype=torch.uint8)
        return x + data.to(torch.float32).sum()


def _leaky_model(tmp_path: Path, secret: Path) -> tuple[Path, ModelMeta]:
    path = tmp_path / "models" / "leak.torchscript"
    path.parent.mkdir(parents=True)
    torch.jit.save(torch.jit.script(Leak(str(secret), secret.stat().st_size)), str(path))
    x, y = (TensorSpec(name=name, datatype="FP32", shape=[-1, 2]) for name in ("x", "y"))
    meta = ModelMeta(name="leak", version="1", format="torchscript", inputs=[x], outputs=[y], sha256="0" * 64,
                     size_bytes=path.stat().st_size, created_at=datetime.now(UTC))  # fmt: skip
    return path, meta


def _infer(backend_url: str) -> tuple[int, str]:
    body = json.dumps({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 2], "data": [0.0, 0.0]}]}).encode()
    request = urllib.request.Request(backend_url, data=body, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310 - loopback/veth URL we built
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def _serve_leak(tmp_path: Path, secret: Path, sandbox: sandboxes.Sandbox | None, label: str) -> tuple[int, str]:
    path, meta = _leaky_model(tmp_path / label, secret)
    if sandbox is not None:
        sandbox.allow_read([path])
    backend = get_backend("torchscript", sandbox=sandbox)
    backend.start(path, meta, tmp_path / label / "work")
    try:
        backend.wait_ready(90)
        return _infer(infer_url(backend.serves(meta)))
    finally:
        backend.stop()


def test_a_torchscript_model_reading_a_host_file_reads_nothing_in_the_sandbox(tmp_path: Path) -> None:
    secret = tmp_path / "host-secret"
    secret.write_bytes(bytes([7, 11, 13]))  # the bytes add up to 31
    # The probe works: run unsandboxed (what a trusted model gets on a follower without the sandbox), it leaks.
    status, text = _serve_leak(tmp_path, secret, None, "trusted")
    assert status == 200, text
    assert json.loads(text)["outputs"][0]["data"] == [31.0, 31.0]
    if not SUPPORT.ok:
        pytest.skip(f"this host cannot sandbox model servers: {SUPPORT.reason}")
    sandbox = sandboxes.Sandbox.open(tmp_path / "sandboxed-work")
    try:
        status, text = _serve_leak(tmp_path, secret, sandbox, "sandboxed")
    finally:
        sandbox.close()
    # No answer carries the sum (the error names the file's path, which may hold "31": pytest-313, say).
    assert status != 200 and "31.0" not in text and "outputs" not in text, text
    assert "No such file" in text or "from_file" in text, text


def test_a_follower_without_the_sandbox_refuses_model_code_unless_trusted(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    monkeypatch.setenv(sandboxes.MODE_SETTING, "off")
    sandboxes.support.cache_clear()
    try:
        assert not sandboxes.support().ok and "off" in sandboxes.support().reason
        with pytest.raises(sandboxes.SandboxRefused, match="torchscript serving model leak:1 runs the model's own code"):
            sandboxes.for_server(tmp_path, runs_model_code=True, trusted=False, what="torchscript serving model leak:1")
        assert sandboxes.for_server(tmp_path, runs_model_code=True, trusted=True, what="trusted") is None
        assert sandboxes.for_server(tmp_path, runs_model_code=False, trusted=False, what="onnx") is None
        # It says so at registration: TorchScript is offered for trusted models only, so the leader places others elsewhere.
        from follower.agent.main import follower_info
        from follower.settings import FollowerSettings

        info = follower_info(FollowerSettings(token="t" * 16, backends=["onnxruntime", "torchscript"]), "i" * 8)  # type: ignore[call-arg]
        assert (info.backends, info.trusted_only) == (["onnxruntime"], ["torchscript"])
    finally:
        sandboxes.support.cache_clear()


def test_the_servers_environment_keeps_no_credential(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BENCHFLEET_FOLLOWER_TOKEN", "join-token")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    env = get_backend("onnxruntime").environment()  # type: ignore[attr-defined]
    assert "BENCHFLEET_FOLLOWER_TOKEN" not in env and "AWS_SECRET_ACCESS_KEY" not in env
    assert env["OMP_NUM_THREADS"] == "2" and env["PATH"]
    assert os.environ["BENCHFLEET_FOLLOWER_TOKEN"] == "join-token"  # the follower's own environment is untouched


def test_stale_network_namespaces_of_dead_followers_are_swept() -> None:
    if not SUPPORT.ok:
        pytest.skip(f"this host cannot sandbox model servers: {SUPPORT.reason}")
    dead = subprocess.Popen(["true"])
    dead.wait()
    name = f"{sandboxes.NETNS_PREFIX}{dead.pid}-0"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        sandboxes.sweep_stale()
        assert not Path(f"/run/netns/{name}").exists()
    finally:
        subprocess.run(["ip", "netns", "delete", name], check=False, capture_output=True)
