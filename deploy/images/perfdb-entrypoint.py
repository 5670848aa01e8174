"""Start SecantusDB on 0.0.0.0:27017 with its data in /data/db. With MONGO_INITDB_ROOT_USERNAME/PASSWORD: on the
first start, create that root user over loopback without auth, stop, and from then on serve with --auth (as mongo:7's
entrypoint does); the password is never logged."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

DATA = Path(os.environ.get("PERFDB_DATA", "/data/db"))
MARKER = DATA / ".benchfleet-root-user"
PORT = 27017


def _server(*flags: str, host: str) -> subprocess.Popen[bytes]:
    argv = ["secantusd-py", "--host", host, "--port", str(PORT), "--storage-path", str(DATA), "--standalone", *flags]
    return subprocess.Popen(argv)


def _create_root(user: str, password: str) -> None:
    import pymongo

    server = _server(host="127.0.0.1")
    try:
        uri = f"mongodb://127.0.0.1:{PORT}/?directConnection=true"
        client: pymongo.MongoClient = pymongo.MongoClient(uri, serverSelectionTimeoutMS=60_000)
        client.admin.command("createUser", user, pwd=password, roles=[{"role": "root", "db": "admin"}])
        client.close()
        MARKER.write_text(user + "\n")
        print(f"perfdb: root user {user!r} created", flush=True)
    finally:
        server.terminate()
        server.wait(timeout=60)


def main() -> int:
    DATA.mkdir(parents=True, exist_ok=True)
    user = os.environ.get("MONGO_INITDB_ROOT_USERNAME", "")
    password = os.environ.get("MONGO_INITDB_ROOT_PASSWORD", "")
    if bool(user) != bool(password):
        print("perfdb: set both MONGO_INITDB_ROOT_USERNAME and MONGO_INITDB_ROOT_PASSWORD, or neither", file=sys.stderr)
        return 2
    if user and not MARKER.exists():
        _create_root(user, password)
    server = _server(*(["--auth"] if user else []), host="0.0.0.0")
    signal.signal(signal.SIGTERM, lambda *_: server.terminate())
    return server.wait()


if __name__ == "__main__":
    sys.exit(main())
