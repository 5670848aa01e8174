"""The in-process leader fixtures of the leader integration tests, reused to seed the browser tests."""

from tests.integration.leader.conftest import leader, make_leader, make_settings, mongo_client  # noqa: F401
