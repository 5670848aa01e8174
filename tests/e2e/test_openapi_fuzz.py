"""Property-based fuzzing of the leader's OpenAPI (schemathesis): >= 1,000 generated requests, no 5xx, no schema violations."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import hypothesis
import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, Phase, given
from schemathesis.checks import content_type_conformance, not_a_server_error, response_schema_conformance

from benchfleet.stack import LocalStack
from tests.faults.outcomes import record

MIN_REQUESTS = 1000
TARGET_REQUESTS = 1050
CHECKS = [not_a_server_error, response_schema_conformance, content_type_conformance]


@pytest.fixture(scope="module")
def leader_url(mongo_service, redis_service, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:  # type: ignore[no-untyped-def]
    # Small limits so generated uploads and bodies hit the 413 paths too.
    stack = LocalStack(tmp_path_factory.mktemp("fuzz"), mongo_uri=mongo_service.url, redis_url=redis_service.url,
                       db_name=f"fuzz_{uuid.uuid4().hex[:8]}", base_env={"PATH": "/usr/bin:/bin"},
                       env={"BENCHFLEET_LEADER_MAX_UPLOAD_BYTES": "200000"})  # fmt: skip
    with stack:
        stack.start_leader()
        yield stack.url, stack.admin_token
    log_text = stack.leader.log_path.read_text(errors="replace")
    assert stack.admin_token not in log_text, "the admin token leaked into the leader's log"


def test_fuzz_openapi(leader_url: tuple[str, str]) -> None:
    url, admin = leader_url
    schema = schemathesis.openapi.from_url(f"{url}/openapi.json")
    headers = {"Authorization": f"Bearer {admin}"}
    session = requests.Session()
    sent: list[int] = []
    failures: list[str] = []
    operations = [result.ok() for result in schema.get_all_operations()]
    per_operation = -(-TARGET_REQUESTS // len(operations))
    for operation in operations:

        @given(case=operation.as_strategy())
        @hypothesis.settings(
            max_examples=per_operation,
            deadline=None,
            database=None,
            derandomize=True,
            phases=[Phase.explicit, Phase.generate],
            suppress_health_check=list(HealthCheck),
        )
        def run(case: schemathesis.Case) -> None:
            response = case.call(base_url=url, session=session, headers=headers, timeout=30)
            sent.append(response.status_code)
            try:
                case.validate_response(response, checks=CHECKS, headers=headers)
            except (Exception, BaseExceptionGroup) as exc:  # collect every violation, then fail once with all of them
                failures.append(f"{case.method} {case.path} -> {response.status_code}: {str(exc)[:300]}")

        run()
    server_errors = sum(1 for code in sent if code >= 500)
    record("bad input", "schemathesis: generated requests against every operation of the leader's OpenAPI",
           f"{len(sent)} requests over {len(operations)} operations: {server_errors} 5xx, {len(failures)} schema violations")
    assert len(sent) >= MIN_REQUESTS, f"only {len(sent)} requests generated"
    assert server_errors == 0 and not failures, "\n".join(failures[:20])
