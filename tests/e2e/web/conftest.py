"""The in-process leader fixtures of the leader integration tests, reused to seed the browser tests; one Chromium per
module."""

from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.web import browser
from tests.integration.leader.conftest import leader, make_leader, make_settings, mongo_client  # noqa: F401


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    with browser.chromium() as launched:
        yield launched
