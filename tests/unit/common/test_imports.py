"""The readers of other tools' result files: each real fixture recognised as its tool; hostile or broken files refused
with the format expected and the field or line (never an exception of another kind, never NaN through); and
benchfleet's recomputation from per-request records, exactly."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from common.formats.imports import detect, read
from common.formats.imports.model import ImportRefused, Level, Record
from common.formats.imports.recompute import recompute

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "imports"
TOOLS = ("vllm", "aiperf", "guidellm", "inference-perf", "genai-bench", "perf_analyzer", "loadgen")


def _files(tool: str) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((FIXTURES / tool).iterdir()) if not p.name.startswith("COMMAND")}


@pytest.mark.parametrize("tool", TOOLS)
def test_each_fixture_is_recognised_as_its_tool(tool: str) -> None:
    assert detect(_files(tool)) == tool


def _vllm() -> dict[str, object]:
    doc: dict[str, object] = json.loads((FIXTURES / "vllm" / "vllm-bench-serve-4.json").read_text())
    return doc


def _refused(files: dict[str, bytes], tool: str | None = None) -> str:
    with pytest.raises(ImportRefused) as refused:
        read(files, tool)  # type: ignore[arg-type]
    return str(refused.value)


def test_broken_and_hostile_files_are_refused_by_name() -> None:
    short = _vllm() | {"start_times": [1.0]}  # records of another length than the run's
    assert "not a vllm bench serve result: r.json: a field of an unexpected shape (ValueError" in _refused(
        {"r.json": json.dumps(short).encode()}, "vllm"
    )
    nan = json.dumps(_vllm() | {"p99_ttft_ms": float("nan")}).encode()
    assert _refused({"r.json": nan}, "vllm").endswith("request rate 4: ttft p99 is nan")
    deep = b"[" * 100_000 + b"]" * 100_000
    assert _refused({"r.json": deep}, "vllm") == "not a vllm bench serve result: r.json: nested deeper than any result file"
    no_count = json.loads(_files("aiperf")["profile_export_aiperf.json"])
    del no_count["request_count"]
    assert _refused({"p.json": json.dumps(no_count).encode()}, "aiperf").endswith("p.json: field request_count missing")
    csv = b"Request Rate,Inferences/Second,p50 latency\n100,97.7,436\n"
    assert _refused({"pa.csv": csv}, "perf_analyzer") == (
        "not a perf_analyzer result: pa.csv line 2: column 'p90 latency' missing or not a number"
    )
    summary = _files("loadgen")["mlperf_log_summary.txt"].replace(b"99.00 percentile latency", b"99.00 percentile lat")
    assert _refused({"mlperf_log_summary.txt": summary}, "loadgen").endswith("no '99.00 percentile latency (ns)' line")
    detail = b':::MLLOG {"key": "loadgen_version", "value": "6"}\nnot a log line\n'
    files = {"mlperf_log_summary.txt": _files("loadgen")["mlperf_log_summary.txt"], "mlperf_log_detail.txt": detail}
    assert _refused(files, "loadgen").endswith("mlperf_log_detail.txt line 2: not a ':::MLLOG {json}' line")
    assert "not recognised as a result of" in _refused({"x.bin": b"\x00\x01"})


def test_recomputed_by_benchfleets_definitions_from_the_records_exactly() -> None:
    """Two requests due at 0 and 1 s, sent 2 ms and 0 ms late: latency and TTFT count the lateness; ITL pools the
    gaps; TPOT is each request's mean gap; the shift is against the tool's own figures."""
    records = [
        Record(sent_s=0.002, due_s=0.0, ok=True, latency_ms=30.0, ttft_ms=10.0, itl_ms=(2.0, 4.0), output_tokens=3),
        Record(sent_s=1.0, due_s=1.0, ok=True, latency_ms=20.0, ttft_ms=8.0, itl_ms=(6.0,), output_tokens=2),
        Record(sent_s=2.0, due_s=2.0, ok=False, latency_ms=None, ttft_ms=None),
    ]
    level = Level(
        level="l",
        pattern="poisson",
        rate=1.0,
        concurrency=None,
        requests=3,
        ok=2,
        duration_s=2.0,
        achieved_rate=1.0,
        latency={"p50": 25.0, "p99": 30.0},
        ttft={"p50": 10.0},
        records=records,
    )
    mine = recompute(level, "the schedule")
    assert mine is not None and mine.requests == 2 and mine.counted_from == "the due time: the schedule"
    assert mine.latency_p50_ms == pytest.approx(26.0) and mine.latency_p99_ms == pytest.approx(31.88)
    assert mine.ttft_p50_ms == pytest.approx(10.0) and mine.itl_p50_ms == pytest.approx(4.0)
    assert (mine.tpot_p50_ms, mine.tpot_p99_ms) == (pytest.approx(4.5), pytest.approx(5.97))
    assert mine.shift == {
        "latency_p50_ms": pytest.approx(26.0 / 25.0 - 1),
        "latency_p99_ms": pytest.approx(31.88 / 30.0 - 1),
        "ttft_p50_ms": pytest.approx(0.0),
    }
    undue = [Record(sent_s=None, due_s=None, ok=True, latency_ms=5.0, ttft_ms=1.0)]
    level.records = undue
    again = recompute(level, None)
    assert again is not None and again.counted_from == "the send (the records say no due time)"
    level.records = []
    assert recompute(level, None) is None
