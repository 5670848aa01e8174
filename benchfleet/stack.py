"""One local benchfleet stack as supervised processes: Redis, a MongoDB-protocol server (SecantusDB), a leader and
followers. The demo, the benches and the test fixtures all start theirs through this one class."""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit

from benchfleet.client import BenchfleetClient
from common.procs import SupervisedProcess, free_port, http_ready

READY_TIMEOUT_S = 60.0


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    """Whether something accepts TCP connections on host:port now."""
    try:
        with socket.create_connection((host, port), timeout=0.2):
            return True
    except OSError:
        return False


def redis_binary() -> str:
    """Debian's redis-server, or a clear error naming the fix."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise RuntimeError("redis-server is not installed (apt-get install redis-server), or set BENCHFLEET_REDIS_URL")
    return binary


def secantus_binary() -> str:
    """SecantusDB's server script (GPL-2.0: run as a process, never imported), or a clear error naming the fix."""
    binary = shutil.which("secantusd-py") or str(Path(sys.executable).parent / "secantusd-py")
    if not os.path.exists(binary):
        raise RuntimeError("secantusd-py is not installed (pip install 'benchfleet[embedded]'), or set BENCHFLEET_MONGO_URI")
    return binary


class LocalStack:
    """A leader and followers on this machine, with their own Redis and database unless given URLs of running ones.

    Processes are keyed "redis", "mongo", "leader" and each follower's id; `restart(key)` brings one back on the same
    port and data. `env` is what every leader and follower process gets (tests may change it between starts).
    """

    def __init__(
        self,
        workdir: Path,
        *,
        mongo_uri: str | None = None,
        redis_url: str | None = None,
        db_name: str | None = None,
        base_env: Mapping[str, str] | None = None,
        env: Mapping[str, str] | None = None,
        leader_port: int | None = None,
        admin_token: str | None = None,
        secret_key: str | None = None,
    ) -> None:
        self.workdir = Path(workdir).absolute()  # the processes' paths hold wherever they run
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.admin_token, self.follower_token = admin_token or secrets.token_urlsafe(24), secrets.token_urlsafe(24)
        self.mongo_uri, self.redis_url = mongo_uri, redis_url
        self.leader_port = leader_port or free_port()
        self.url = f"http://127.0.0.1:{self.leader_port}"
        self._ports: dict[str, int] = {}
        self._runs: dict[str, int] = {}
        self._every: list[tuple[str, SupervisedProcess]] = []  # every process started, restarts included, in order
        self.env: dict[str, str] = {**(os.environ if base_env is None else base_env)}
        self.env.update(
            {
                "PYTHONUNBUFFERED": "1",
                "BENCHFLEET_LEADER_PORT": str(self.leader_port),
                "BENCHFLEET_LEADER_ADMIN_TOKEN": self.admin_token,
                "BENCHFLEET_LEADER_FOLLOWER_TOKEN": self.follower_token,
                "BENCHFLEET_FOLLOWER_LEADER_URL": self.url,
                "BENCHFLEET_FOLLOWER_TOKEN": self.follower_token,
                # One host's fleet: its join token never leaves the host, so a follower joining with it is trusted (a
                # leader for followers on other hosts keeps the default: each is approved by an admin).
                "BENCHFLEET_LEADER_FOLLOWER_APPROVAL": "join-token",
                # ... and its user is its admin: every team's targets may be on loopback (the endpoints they run here),
                # never the fleet's own services (common/egress.py).
                "BENCHFLEET_LEADER_EGRESS_ALLOW": "127.0.0.0/8,::1/128",
                # The key target secrets are sealed with (kept across leader restarts of this stack; `up` keeps one on disk).
                "BENCHFLEET_LEADER_SECRET_KEY": secret_key or secrets.token_urlsafe(32),
            }
        )
        if db_name is not None:
            self.env["BENCHFLEET_LEADER_DB_NAME"] = db_name
        self.env.update(env or {})
        if leader_port is None:
            # A leader on a free port gets a free live-progress port too: the default (8701) is the README fleet's, and
            # a demo or a test beside it would take it (or fail to).
            self.env.setdefault("BENCHFLEET_LEADER_GRPC_PORT", str(free_port()))
        self._set_urls()

    # -- the two services the leader needs -----------------------------------------------------------------------

    def start_redis(self, *, durable: bool = False) -> str:
        """Start redis-server on a free (or, on restart, its own) loopback port; `durable` fsyncs every write."""
        port = self._ports.setdefault("redis", free_port())
        data = self.workdir / "redis"
        data.mkdir(exist_ok=True)
        keep = ["--appendonly", "yes", "--appendfsync", "always"] if durable else ["--appendonly", "no"]
        argv = [redis_binary(), "--bind", "127.0.0.1", "--port", str(port), "--save", "", *keep, "--dir", str(data)]
        self._spawn("redis", argv, env=None).wait_ready(lambda: port_open(port), timeout_s=30)
        self.redis_url = f"redis://127.0.0.1:{port}/0"
        self._set_urls()
        return self.redis_url

    def start_mongo(self, *, in_memory: bool = False) -> str:
        """Start SecantusDB on a free (or, on restart, its own) loopback port, its data under the work dir or in memory."""
        port = self._ports.setdefault("mongo", free_port())
        storage = ":memory:" if in_memory else str(self.workdir / "db")
        argv = [secantus_binary(), "--host", "127.0.0.1", "--port", str(port), "--storage-path", storage, "--standalone"]
        self._spawn("mongo", argv, env=None).wait_ready(lambda: port_open(port), timeout_s=READY_TIMEOUT_S)
        self.mongo_uri = f"mongodb://127.0.0.1:{port}/?directConnection=true&retryWrites=false"
        self._set_urls()
        return self.mongo_uri

    def _set_urls(self) -> None:
        if self.mongo_uri:
            self.env["BENCHFLEET_MONGO_URI"] = self.mongo_uri
            # The database is one of the fleet's own services: no target may be it (common/egress.py).
            where = urlsplit(self.mongo_uri.split(",", 1)[0])
            self.env["BENCHFLEET_FOLLOWER_FLEET_SERVICES"] = f"{where.hostname}:{where.port or 27017}"
        if self.redis_url:
            self.env["BENCHFLEET_REDIS_URL"] = self.redis_url

    # -- benchfleet's own processes ------------------------------------------------------------------------------

    def start_leader(self, *, wait: bool = True) -> SupervisedProcess:
        """Start the leader (`python -m leader`); with `wait`, until /healthz answers."""
        if not (self.mongo_uri and self.redis_url):
            raise RuntimeError("start (or give the URLs of) Redis and the database before the leader")
        proc = self._spawn("leader", [sys.executable, "-m", "leader"], env=self.env)
        if wait:
            proc.wait_ready(http_ready(f"{self.url}/healthz"), timeout_s=READY_TIMEOUT_S)
        return proc

    def start_follower(
        self,
        follower_id: str,
        *,
        wait: bool = True,
        ready: Callable[[Any], bool] = lambda view: view.state != "missing",
        env: Mapping[str, str] | None = None,
    ) -> SupervisedProcess:
        """Start a follower agent; with `wait`, until the leader lists it and `ready(its view)` holds."""
        follower_env = {
            **self.env,
            "BENCHFLEET_FOLLOWER_FOLLOWER_ID": follower_id,
            "BENCHFLEET_FOLLOWER_WORK_DIR": str(self.workdir / follower_id),
            **(env or {}),
        }
        follower_env.pop("BENCHFLEET_LEADER_SECRET_KEY", None)  # the leader's alone: a follower gets opened secrets
        proc = self._spawn(follower_id, [sys.executable, "-m", "follower"], env=follower_env)
        if wait:
            with self.client() as client:
                proc.wait_ready(
                    lambda: any(f.info.follower_id == follower_id and ready(f) for f in client.followers()),
                    timeout_s=READY_TIMEOUT_S,
                )
        return proc

    @property
    def procs(self) -> dict[str, SupervisedProcess]:
        """The latest process started under each key."""
        return dict(self._every)

    @property
    def leader(self) -> SupervisedProcess:
        """The leader process now running."""
        return self.procs["leader"]

    @property
    def followers(self) -> list[SupervisedProcess]:
        """Every follower process started so far (restarts included), in start order."""
        return [p for key, p in self._every if key not in ("redis", "mongo", "leader")]

    def client(self) -> BenchfleetClient:
        """An admin client of the leader."""
        return BenchfleetClient(self.url, self.admin_token)

    # -- lifecycle -----------------------------------------------------------------------------------------------

    def _spawn(self, key: str, argv: list[str], env: Mapping[str, str] | None) -> SupervisedProcess:
        n = self._runs.get(key, 0)
        self._runs[key] = n + 1
        name = f"{key}-{n}" if key not in ("redis", "mongo", "leader") or n else key
        proc = SupervisedProcess(argv, name=name, log_path=self.workdir / f"{name}.log", env=dict(env) if env else None)
        self._every.append((key, proc))
        proc.start()
        return proc

    def restart(self, key: str, *, grace_s: float = 10.0) -> SupervisedProcess:
        """Stop one process (SIGTERM, then SIGKILL after the grace) and start it again on the same port and data."""
        if key not in ("redis", "mongo", "leader"):
            raise ValueError(f"restart {key!r}: restart redis, mongo or leader (start a follower again with start_follower)")
        self.procs[key].stop(grace_s=grace_s)
        if key == "redis":
            self.start_redis(durable="yes" in self.procs["redis"].argv)
        elif key == "mongo":
            self.start_mongo(in_memory=":memory:" in self.procs["mongo"].argv)
        else:
            self.start_leader()
        return self.procs[key]

    def log_tails(self, n_lines: int = 20) -> list[tuple[str, str]]:
        """(name, last lines of its log) of every process started, for a failure report."""
        return [(p.name, p.log_tail(n_lines)) for _, p in self._every]

    def close(self, grace_s: float | None = None) -> None:
        """Stop every process: followers first, then the leader, then the services."""
        for _, proc in reversed(self._every):
            proc.stop(grace_s=grace_s)

    def __enter__(self) -> LocalStack:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()
