"""`python -m follower`: run the follower agent with settings from the environment."""

import logging
import os
import sys

from pydantic import ValidationError

from common.logs import setup_logging
from follower.agent.main import run_agent
from follower.settings import FollowerSettings


def main() -> int:
    """Validate the settings, then run the agent until stopped (then the process ends at once, status 0)."""
    try:
        setup_logging("follower")  # JSON lines by default; BENCHFLEET_LOG_FORMAT=text for humans
        settings = FollowerSettings()  # type: ignore[call-arg]  # the token comes from the environment
    except (ValidationError, ValueError) as exc:
        # SecretStr keeps the token out of the message; only field names and reasons are shown.
        print(f"benchfleet follower: invalid settings:\n{exc}", file=sys.stderr)
        return 2
    run_agent(settings)
    # Its jobs are given back and its point and server stopped: exit now. The interpreter's own teardown waits on
    # library threads (the broker's, gRPC's) for up to seconds more, past a stop's 5 s.
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
