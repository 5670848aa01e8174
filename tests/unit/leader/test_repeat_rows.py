"""A job with repeats: its rows say which run each point is, and compare pairs each run with the other job's run of
the same number instead of keeping one run per configuration."""

from __future__ import annotations

from typing import Any

from common.spec.grid import expand
from common.spec.parse import parse_spec
from leader.analysis.compare import point_key
from leader.analysis.leaderboard import to_row
from leader.store.leaderboard import row_from_result
from tests.unit.leader.test_load_label import _result

SPEC = {"name": "j", "model": "m:1", "batch_sizes": [1, 4], "load": {"rate": 100, "duration": "2s"}, "repeats": 3}


def _rows(job_id: str) -> list[dict[str, Any]]:
    docs = [_result(p).model_dump(mode="json") for p in expand(parse_spec(SPEC))]
    return [row_from_result(job_id=job_id, job_name="j", model="m:1", slo_p99_ms=None, attempt=1, result=d) for d in docs]


def test_each_run_is_its_own_row_and_its_own_compare_key() -> None:
    a, b = _rows("a"), _rows("b")
    assert [to_row(r).repeat for r in a] == [0, 0, 1, 1, 2, 2]
    keys = [point_key(r) for r in a]
    assert len(set(keys)) == 6 and keys[2].endswith("|run 2") and not keys[0].endswith("run 1")
    assert keys == [point_key(r) for r in b]  # run k of job a meets run k of job b
