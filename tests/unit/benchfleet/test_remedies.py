"""An invalid point says what to change: every reason code has its remedy, and the CLI's results table (so the end of
`benchfleet demo`) prints it once per reason, naming the points it concerns."""

from __future__ import annotations

import io
import re
from datetime import UTC, datetime
from typing import get_args

from rich.console import Console

from benchfleet.render import print_results
from common.spec.grid import expand
from common.spec.job import JobSpec
from common.spec.load import LoadSpec
from common.spec.parse import parse_spec
from common.wire.jobs import JobResults, JobView
from common.wire.remedies import REMEDY
from common.wire.results import Reason, ReasonCode
from tests.unit.leader.test_load_label import _result

SPEC = {"name": "demo", "model": "m:1", "load": {"rate": [50, 100, 200], "duration": "10s"}}


def test_every_reason_code_has_a_remedy_that_names_something_to_do() -> None:
    assert set(REMEDY) == set(get_args(ReasonCode))
    fields = set(LoadSpec.model_fields) | set(JobSpec.model_fields)
    for code, remedy in REMEDY.items():
        for named in re.findall(r"\b(?:load|repeats|target)\.([a-z_]+)", remedy):  # each field it names exists
            assert named in fields or named in ("count", "shards"), (code, named)


def test_the_results_table_says_what_to_change_for_each_invalid_points_reasons() -> None:
    spec = parse_spec(SPEC)
    lag = Reason(code="send_lag", text="send lag p99 1.300 ms (of requests that had a free in-flight slot) exceeds 1 ms")
    few = Reason(code="too_few", text="only 250 requests completed; a p99 needs >= 459 (raise duration or rate)")
    points = [_result(p) for p in expand(spec)]
    points[0] = points[0].model_copy(update={"valid": False, "reasons": [lag, few]})
    points[2] = points[2].model_copy(update={"valid": False, "reasons": [lag]})
    now = datetime.now(UTC)
    job = JobView(id="j1", name="demo", state="succeeded", attempt=1, follower_id="f", spec=spec, model_ref="m:1",
                  points_total=3, points_done=3, estimate_s=10.0, created_at=now, updated_at=now, history=[])
    out = io.StringIO()
    print_results(Console(file=out, width=250), JobResults(job=job, points=points))
    text = " ".join(out.getvalue().split())
    assert f"what to change (points 0, 2): {REMEDY['send_lag']}" in text, text
    assert f"what to change (point 0): {REMEDY['too_few']}" in text, text
    assert text.count("what to change") == 2  # once per reason, not per point; the valid point 1 adds none
