"""Where a model server runs: a sandbox that sees only its model and work directory, as an unprivileged user.

A model file can carry code: a TorchScript `forward()` may call `torch.from_file`, a SavedModel may read any file, and
a server that parses hostile bytes may have bugs of its own. So every model server this follower starts runs

- with a scrubbed environment (`server_environment`: no join token, no credential, nothing but what serving needs),
  whether or not it is sandboxed;
- under bubblewrap as user `nobody` (65534) with no capabilities, in its own PID, IPC, UTS and mount namespaces: the
  root is empty but for the system's read-only /usr, the server's own runtime (read-only), the attempt's work
  directory (read-only), a private home and /tmp; the follower's credential, caches and database are not there;
- in a network namespace of its own, joined to the follower by one veth pair: the server listens on its side's
  address and the follower connects to it; the sandbox has no route anywhere else, and a firewall rule on the host
  drops every connection the sandbox opens (it may answer, never call), so Redis, the leader and the database on the
  host's loopback are out of its reach.

The sandbox needs root (veth pairs and a uid change), bubblewrap, iproute2 and nftables (scripts/setup.sh installs
them). Where it cannot be set up, `for_server` refuses the backends that run a model's own code (TorchScript,
SavedModels) unless an admin marked the model trusted, and says why; servers that only read data (ONNX,
safetensors) still run, unsandboxed but with the scrubbed environment. `BENCHFLEET_SANDBOX=off` turns the sandbox
off on purpose (the same refusal then applies).
"""

from __future__ import annotations

import contextlib
import functools
import ipaddress
import itertools
import logging
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

MODE_SETTING = "BENCHFLEET_SANDBOX"  # auto (default: sandbox when this host can) | off
NOBODY = 65534
SUBNET = ipaddress.ip_network("10.213.0.0/16")  # one /30 per sandbox: .1 the follower's side, .2 the server's
NETNS_PREFIX = "benchfleet-"
FIREWALL_TABLE = "benchfleet_sandbox"
SBIN = ("/usr/local/sbin", "/usr/sbin", "/sbin", "/usr/bin", "/bin")
# What a server may inherit from the follower's environment (by name or prefix); everything else stays behind.
ENV_NAMES = frozenset({"PATH", "LANG", "LANGUAGE", "TZ", "LD_LIBRARY_PATH", "TERM"})
ENV_PREFIXES = ("LC_", "CUDA_", "NVIDIA_", "OMP_", "MKL_", "KMP_", "OPENBLAS_", "ORT_", "TF_", "VLLM_", "SGLANG_")
_FIREWALL = f"""table inet {FIREWALL_TABLE} {{}}
delete table inet {FIREWALL_TABLE}
table inet {FIREWALL_TABLE} {{
  chain input {{ type filter hook input priority 0; policy accept;
    iifname "bfh*" ct state established,related accept; iifname "bfh*" drop; }}
  chain forward {{ type filter hook forward priority 0; policy accept; iifname "bfh*" drop; }}
}}
"""
_counter = itertools.count()


class SandboxRefused(RuntimeError):
    """A server that would run a model's own code, on a follower that cannot sandbox it."""


def server_environment(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """A model server's environment: the follower's locale, path and accelerator settings only, plus `extra`."""
    env = {k: v for k, v in os.environ.items() if k in ENV_NAMES or k.startswith(ENV_PREFIXES)}
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    env.update(extra or {})
    return env


@dataclass(frozen=True)
class Support:
    """Whether this follower can sandbox model servers, and why not."""

    ok: bool
    reason: str


@functools.cache
def support() -> Support:
    """Probed once per process: the tools are there and a trial sandbox runs /bin/true as nobody."""
    if os.environ.get(MODE_SETTING, "auto").strip().lower() == "off":
        return Support(False, f"the sandbox is turned off ({MODE_SETTING}=off)")
    if os.geteuid() != 0:
        return Support(False, "the follower does not run as root (the sandbox needs root for its network and user)")
    missing = [tool for tool in ("bwrap", "ip", "nft", "setpriv") if _tool(tool) is None]
    if missing:
        return Support(False, f"missing {', '.join(missing)} (apt-get install bubblewrap iproute2 nftables util-linux)")
    try:
        with tempfile.TemporaryDirectory(prefix="benchfleet-sandbox-probe-") as tmp, Sandbox.open(Path(tmp)) as box:
            argv = box.command(["/bin/true"], cwd=Path(tmp))
            done = subprocess.run(argv, env=server_environment(), capture_output=True, timeout=20, check=False)
            if done.returncode != 0:
                return Support(False, f"a trial sandbox failed: {done.stderr.decode(errors='replace').strip()[-300:]}")
    except (OSError, subprocess.SubprocessError, RuntimeError) as exc:
        return Support(False, f"a trial sandbox could not be set up: {exc}")
    return Support(True, "bubblewrap as nobody in its own network namespace")


def for_server(workdir: Path, *, runs_model_code: bool, trusted: bool, what: str) -> Sandbox | None:
    """A sandbox for one server, None where it runs without one; SandboxRefused where it must not run at all."""
    found = support()
    if found.ok:
        return Sandbox.open(Path(workdir))
    if runs_model_code and not trusted:
        raise SandboxRefused(
            f"{what} runs the model's own code, and this follower cannot sandbox it: {found.reason}. "
            "An admin may mark the model trusted (PATCH /models/{name}/{version}, trusted: true) to run it anyway"
        )
    log.warning("%s runs unsandboxed (scrubbed environment only): %s", what, found.reason)
    return None


def _tool(name: str) -> str | None:
    """A tool's absolute path: on PATH, or in the sbin directories a service's PATH often lacks."""
    return shutil.which(name, path=os.pathsep.join([os.environ.get("PATH", ""), *SBIN]))


def _need(name: str) -> str:
    found = _tool(name)
    if found is None:
        raise RuntimeError(f"{name} is not installed")
    return found


def _ip(*args: str) -> None:
    done = subprocess.run([_need("ip"), *args], capture_output=True, timeout=10, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.decode(errors='replace').strip()}")


def sweep_stale() -> None:
    """Delete network namespaces left by followers that died without closing their sandboxes."""
    for entry in Path("/run/netns").glob(f"{NETNS_PREFIX}*"):
        pid, _, slot = entry.name[len(NETNS_PREFIX) :].partition("-")
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            # Its veth pair first (bfh<slot> is unique on the host while the namespace holds its peer): at once,
            # where the namespace's deletion alone would take it only later.
            if slot.isdigit() and Path(f"/sys/class/net/bfh{slot}").exists():
                with contextlib.suppress(RuntimeError, OSError, subprocess.SubprocessError):
                    _ip("link", "delete", f"bfh{slot}")
            with contextlib.suppress(RuntimeError, OSError, subprocess.SubprocessError):
                _ip("netns", "delete", entry.name)


class Sandbox:
    """One server's network namespace and filesystem view; `command` wraps its argv, `close` removes it all."""

    def __init__(self, workdir: Path, netns: str, host: str, peer: str) -> None:
        self.workdir = workdir
        self.netns = netns
        self.host = host  # the server listens here; the follower connects here
        self.peer = peer  # the follower's end of the veth pair (the sandbox may answer it, never call it)
        self.outer, self.inner = "", ""  # the veth pair's interfaces: the follower's side, the server's (in netns)
        self.root = workdir / "sandbox"
        self.home = self.root / "home"  # the server's only writable directory (and /tmp, a private tmpfs)
        self._readable: list[Path] = []
        self._writable: list[Path] = []

    @classmethod
    def open(cls, workdir: Path) -> Sandbox:
        """Create the network namespace and veth pair (trying free slots), the firewall rule and the server's home."""
        sweep_stale()
        subprocess.run([_need("nft"), "-f", "-"], input=_FIREWALL.encode(), capture_output=True, timeout=10, check=True)
        slots = SUBNET.num_addresses // 4
        first = (os.getpid() * 131 + next(_counter) * 17) % slots
        last_error = ""
        for step in range(32):
            slot = (first + step) % slots
            netns = f"{NETNS_PREFIX}{os.getpid()}-{slot}"
            base = SUBNET.network_address + 4 * slot
            outer, inner = f"bfh{slot}", f"bfn{slot}"
            try:
                _ip("netns", "add", netns)
            except RuntimeError as exc:
                last_error = str(exc)
                continue
            try:
                _ip("link", "add", outer, "type", "veth", "peer", "name", inner, "netns", netns)
                _ip("addr", "add", f"{base + 1}/30", "dev", outer)
                _ip("link", "set", outer, "up")
                _ip("-n", netns, "addr", "add", f"{base + 2}/30", "dev", inner)
                _ip("-n", netns, "link", "set", inner, "up")
                _ip("-n", netns, "link", "set", "lo", "up")
            except RuntimeError as exc:
                last_error = str(exc)
                with contextlib.suppress(RuntimeError):
                    _ip("netns", "delete", netns)
                continue
            box = cls(Path(workdir), netns, str(base + 2), str(base + 1))
            box.outer, box.inner = outer, inner
            box._make_home()
            return box
        raise RuntimeError(f"no free sandbox network slot: {last_error}")

    def _make_home(self) -> None:
        etc = self.root / "etc"
        for path in (self.home, etc):
            path.mkdir(parents=True, exist_ok=True)
        (etc / "passwd").write_text("root:x:0:0::/root:/usr/sbin/nologin\nnobody:x:65534:65534::/home:/usr/sbin/nologin\n")
        (etc / "group").write_text("root:x:0:\nnogroup:x:65534:\n")
        (etc / "hosts").write_text(f"127.0.0.1 localhost\n::1 localhost\n{self.host} sandbox\n")
        (etc / "nsswitch.conf").write_text("passwd: files\ngroup: files\nhosts: files\n")
        os.chown(self.home, NOBODY, NOBODY)
        # The server reads the attempt's files (its model, a repository written for it): nobody must enter the directory.
        self.workdir.chmod(self.workdir.stat().st_mode | 0o055)

    def allow_read(self, paths: Iterable[Path]) -> None:
        """Make these files or directories visible, read-only, at their own paths."""
        self._readable.extend(Path(p) for p in paths)

    def allow_write(self, paths: Iterable[Path]) -> None:
        """Make these directories visible and writable at their own paths (e.g. MPS's pipe directory, which its
        clients connect through)."""
        self._writable.extend(Path(p) for p in paths)

    def command(self, argv: list[str], *, cwd: Path | None = None) -> list[str]:
        """`argv` run inside the sandbox (the caller passes the environment: `server_environment`)."""
        etc = self.root / "etc"
        wrap = [
            _need("ip"),
            "netns",
            "exec",
            self.netns,
            _need("bwrap"),
            "--die-with-parent",
            "--unshare-pid",
            "--unshare-ipc",
            "--unshare-uts",
            "--unshare-cgroup-try",
            "--hostname",
            "sandbox",
            "--ro-bind",
            "/usr",
            "/usr",
        ]
        for link in ("bin", "lib", "lib64", "sbin"):
            target = Path("/") / link
            if target.is_symlink():
                wrap += ["--symlink", os.readlink(target), str(target)]
            elif target.exists():
                wrap += ["--ro-bind", str(target), str(target)]
        wrap += ["--proc", "/proc", "--dev", "/dev", "--ro-bind", "/sys", "/sys"]
        wrap += ["--perms", "1777", "--tmpfs", "/dev/shm", "--perms", "1777", "--tmpfs", "/tmp"]
        wrap += ["--perms", "0755", "--dir", "/etc"]
        for name in ("passwd", "group", "hosts", "nsswitch.conf"):
            wrap += ["--ro-bind", str(etc / name), f"/etc/{name}"]
        for name in ("ld.so.cache", "localtime", "alternatives"):
            wrap += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
        for device in sorted(Path("/dev").glob("nvidia*")):
            wrap += ["--dev-bind", str(device), str(device)]
        made: set[Path] = {Path("/"), Path("/tmp")}
        for path in _with_targets([*self._readable, self.workdir]):
            # bubblewrap makes missing parents owner-only (root's): make them traversable for nobody first.
            for parent in reversed(path.parents):
                if parent not in made:
                    made.add(parent)
                    wrap += ["--perms", "0755", "--dir", str(parent)]
            wrap += ["--ro-bind", str(path), str(path)]
        for path in self._writable:
            for parent in reversed(path.parents):
                if parent not in made:
                    made.add(parent)
                    wrap += ["--perms", "0755", "--dir", str(parent)]
            wrap += ["--bind", str(path), str(path)]
        wrap += ["--bind", str(self.home), str(self.home), "--setenv", "HOME", str(self.home)]
        # Inside, setpriv becomes the real user nobody (not a user-namespace alias of root) with every capability
        # gone for good (bounding set cleared, no new privileges): the server starts as nobody.
        wrap += [
            "--chdir",
            str(cwd or self.home),
            "--",
            _need("setpriv"),
            f"--reuid={NOBODY}",
            f"--regid={NOBODY}",
            "--clear-groups",
            "--inh-caps=-all",
            "--bounding-set=-all",
            "--no-new-privs",
            "--",
            *argv,
        ]
        return wrap

    def close(self) -> None:
        """Remove the veth pair (both ends and their qdiscs, at once) and the network namespace; idempotent. (The
        namespace's deletion alone would take the pair with it, but later, in the kernel's cleanup work.)"""
        if self.outer:
            with contextlib.suppress(RuntimeError, OSError, subprocess.SubprocessError):
                _ip("link", "delete", self.outer)
        with contextlib.suppress(RuntimeError, OSError, subprocess.SubprocessError):
            _ip("netns", "delete", self.netns)

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _with_targets(paths: Iterable[Path]) -> Iterator[Path]:
    """Each existing path once, then the place it resolves to when that differs (a venv's python links elsewhere)."""
    seen: set[Path] = set()
    for path in paths:
        for item in (Path(os.path.abspath(path)), Path(path).resolve()):
            if item.exists() and item not in seen:
                seen.add(item)
                yield item
