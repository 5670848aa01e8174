"""`python -m follower`: run the follower agent with settings from the environment."""

import logging

from follower.agent import run_agent
from follower.settings import FollowerSettings

if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    run_agent(FollowerSettings())  # type: ignore[call-arg]
