"""The jobs list's validators (leader/api/conditional.py): made from what the answer depends on, moving every
STALE_AFTER_S of the leader's clock, compared weakly."""

from __future__ import annotations

import pytest
from starlette.requests import Request

from leader.api import conditional


def _asking(if_none_match: str | None) -> Request:
    headers = [] if if_none_match is None else [(b"if-none-match", if_none_match.encode())]
    return Request({"type": "http", "method": "GET", "path": "/", "headers": headers, "query_string": b""})


def test_a_validator_names_its_parts_and_the_clock_window(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [100.0]
    monkeypatch.setattr(conditional.time, "monotonic", lambda: now[0])
    tag = conditional.etag("jobs", 7, None, "state=queued")
    assert tag == conditional.etag("jobs", 7, None, "state=queued")
    assert tag != conditional.etag("jobs", 8, None, "state=queued") != conditional.etag("jobs", 7, "red", "state=queued")
    now[0] = 109.9  # the same 10 s window
    assert conditional.etag("jobs", 7, None, "state=queued") == tag
    now[0] = 110.0  # the next: positions and tallies are made again at least this often
    assert conditional.etag("jobs", 7, None, "state=queued") != tag


def test_if_none_match_is_compared_weakly_and_may_list_several() -> None:
    tag = 'W/"abc"'
    assert conditional.fresh(_asking('W/"abc"'), tag)
    assert conditional.fresh(_asking('"abc"'), tag)
    assert conditional.fresh(_asking('W/"x", W/"abc"'), tag)
    assert conditional.fresh(_asking("*"), tag)
    assert not conditional.fresh(_asking('W/"abd"'), tag)
    assert not conditional.fresh(_asking(None), tag)
    answer = conditional.not_modified(tag)
    assert (answer.status_code, answer.body, answer.headers["ETag"]) == (304, b"", tag)
