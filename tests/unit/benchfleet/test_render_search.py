"""A search point reads at 80 columns: its answer with the interval and how it stopped as the title, every probe
with its verdict, the chosen one starred, the search's notes numbered under it."""

from __future__ import annotations

import io

from rich.console import Console

from benchfleet.render import search_sheet
from benchfleet.tables import print_sheet
from common.spec.job import PointSpec
from common.wire.results import PointResult
from common.wire.search import SearchAnswer, SearchProbe


def _answer() -> SearchAnswer:
    probes = [
        SearchProbe(load=20, valid=True, passed=True, margin=0.9, p99_ms=4.1, p99_ci_ms=(4.0, 4.3), achieved_rate=19.8),
        SearchProbe(
            load=240,
            valid=False,
            passed=False,
            p99_ms=900.0,
            achieved_rate=231.0,
            reasons=["the server could not keep up: it delivered 231 req/s of the 240 offered (96%)"],
        ),
        SearchProbe(load=69.3, valid=True, passed=True, margin=0.8, p99_ms=8.0, achieved_rate=70.1),
        SearchProbe(
            load=186,
            valid=True,
            passed=True,
            margin=0.02,
            p99_ms=39.2,
            p99_ci_ms=(35.0, 44.0),
            uncertain=True,
            pooled=True,
            achieved_rate=185.2,
        ),
        SearchProbe(load=186, valid=True, passed=True, margin=0.05, p99_ms=37.0, repeat=True, pooled=True, achieved_rate=186.4),
        SearchProbe(load=195, valid=True, passed=False, margin=-0.4, p99_ms=56.0, achieved_rate=194.0),
    ]
    return SearchAnswer(
        criterion="p99 <= 40 ms",
        found=186,
        lowest_fail=195,
        precision=0.05,
        width=0.046,
        stopped="resolved",
        notes=["the verdict at 186 req/s is uncertain: both runs together still straddle the limit"],
        chosen=4,
        probes=probes,
    )


def test_a_search_sheet_fits_80_columns_with_its_answer_probes_and_notes() -> None:
    point = PointSpec(index=2, backend="onnxruntime", batch_size=1, pattern="poisson", rate=186, duration_s=4, warmup_s=1, seed=1)
    result = PointResult.model_construct(point=point, search=_answer())
    out = io.StringIO()
    print_sheet(Console(file=out, width=80, force_terminal=True, color_system=None), search_sheet(result))
    text = out.getvalue()
    lines = text.splitlines()
    assert all(len(line) <= 80 for line in lines), [len(line) for line in lines]
    flat = " ".join(text.split())
    assert "search, point 2: 186 req/s (fails at 195), p99 <= 40 ms; 6 probes, resolved to the asked precision" in flat
    rows = [line.split() for line in lines if line.strip()[:1].isdigit()]
    assert [row[1] for row in rows[:6]] == ["20", "240", "69.3", "186", "186", "195"]
    assert "pass, uncertain, pooled" in flat and "FAIL (invalid) [1]" in flat and "pass, pooled *" in flat
    assert "1. the server could not keep up" in flat and "2. the verdict at 186 req/s is uncertain" in flat
