"""`python -m leader`: serve the leader with uvicorn (one worker: the background loops must run once)."""

from __future__ import annotations

import gc
import sys

import uvicorn
from pydantic import ValidationError

from common.logs import setup_logging
from leader.app import create_app
from leader.httpserver import header_deadline_protocol
from leader.settings import LeaderSettings

SHUTDOWN_GRACE_S = 2
# The collector's thresholds for a process that holds every job's index and book entry (hundreds of thousands of
# objects with 10,000 jobs) and serves tens of concurrent requests: at Python's default (700, 10, 10), the requests'
# objects alive across a young collection were promoted and the old generation (400,000 objects) was scanned 37 times
# in a 10,000-job storm, 300 ms each, every request stalled meanwhile (bench/leader_load.py: heartbeats' p99 0.89 s,
# max 2.6 s). Collected 70x less often when young (about 50,000 objects: a few ms), requests' objects die young.
GC_THRESHOLDS = (50_000, 20, 10)


def tune_collector() -> None:
    """Move what the leader has built so far (modules, schemas, routes: about 190,000 objects) out of the
    collector's scans for good (`gc.freeze`), and collect at GC_THRESHOLDS."""
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


def main() -> int:
    """Read the settings from the environment and serve until interrupted."""
    try:
        setup_logging("leader")  # JSON lines by default; BENCHFLEET_LOG_FORMAT=text for humans
    except ValueError as exc:
        print(f"benchfleet leader: {exc}", file=sys.stderr)
        return 2
    try:
        settings = LeaderSettings()  # type: ignore[call-arg]  # required tokens come from the environment
    except ValidationError as exc:
        # Secrets are hidden from the error (hide_input_in_errors); only field names and reasons are shown.
        print(f"benchfleet leader: invalid settings:\n{exc}", file=sys.stderr)
        return 2
    # Forwarded headers are read by the app itself, from the proxies its settings trust (leader/app.py).
    tls = {"ssl_certfile": str(settings.tls_certfile), "ssl_keyfile": str(settings.tls_keyfile)} if settings.tls_certfile else {}
    app = create_app(settings)
    tune_collector()
    # SIGTERM: requests in flight get SHUTDOWN_GRACE_S to finish, then the lifespan stops the loops (each step bounded):
    # the leader is gone within 5 s, as compose and the kubelet expect.
    uvicorn.run(
        app,
        host=settings.host,
        port=settings.port,
        workers=1,
        log_config=None,
        proxy_headers=False,
        timeout_graceful_shutdown=SHUTDOWN_GRACE_S,
        http=header_deadline_protocol(settings.header_timeout_s),
        **tls,  # type: ignore[arg-type]
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
