"""Imports through the leader's API: each tool's real result files (tests/fixtures/imports, made by
bench/import_fixtures.py) become a job of kind `imported` whose points carry the tool's own figures, its definitions and
no verdict; the raw files come back byte for byte; a bad file is a 422 naming the format and the field or line, and
leaves nothing stored."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.integration.leader.conftest import ADMIN, Leader

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "imports"


def fixture_files(tool: str) -> dict[str, bytes]:
    """A tool's result files as its run left them (the command that made them is not one of them)."""
    return {p.name: p.read_bytes() for p in sorted((FIXTURES / tool).iterdir()) if not p.name.startswith("COMMAND")}


def post_import(leader: Leader, files: dict[str, bytes], **fields: str) -> Any:
    parts = [("file", (name, data, "application/octet-stream")) for name, data in files.items()]
    return leader.client.post("/api/v1/imports", headers=ADMIN, data=fields, files=parts)


# tool -> (points, its file's figure for point 0 that the point must carry exactly: (path in the result, value))
def _vllm_p99_ttft() -> float:
    return float(json.loads((FIXTURES / "vllm" / "vllm-bench-serve-4.json").read_text())["p99_ttft_ms"])


def _aiperf_p99_latency() -> float:
    return float(json.loads((FIXTURES / "aiperf" / "profile_export_aiperf.json").read_text())["request_latency"]["p99"])


def _guidellm_p99_ttft() -> float:
    doc = json.loads((FIXTURES / "guidellm" / "benchmarks.json").read_text())
    return float(doc["benchmarks"][0]["metrics"]["time_to_first_token_ms"]["successful"]["percentiles"]["p99"])


def _inference_perf_p99_latency() -> float:
    doc = json.loads((FIXTURES / "inference-perf" / "stage_0_lifecycle_metrics.json").read_text())
    return 1e3 * float(doc["successes"]["latency"]["request_latency"]["p99"])


def _perf_analyzer_p99() -> float:
    header, first = (FIXTURES / "perf_analyzer" / "perf_analyzer.csv").read_text().splitlines()[:2]
    return 1e-3 * float(dict(zip(header.split(","), first.split(","), strict=True))["p99 latency"])


def _loadgen_p99() -> float:
    for line in (FIXTURES / "loadgen" / "mlperf_log_summary.txt").read_text().splitlines():
        if line.startswith("99.00 percentile latency (ns)"):
            return 1e-6 * float(line.split(":")[1])
    raise AssertionError("the fixture has its p99 line")


def _genai_p50_latency() -> float:
    import numpy as np

    doc = json.loads((FIXTURES / "genai-bench" / "D16_16_text-to-text_num_concurrency_1_time_1s.json").read_text())
    return float(np.percentile([1e3 * r["e2e_latency"] for r in doc["individual_request_metrics"]], 50))


CASES = {
    "vllm": (2, ("llm", "ttft_ms", "p99"), _vllm_p99_ttft),
    "aiperf": (1, ("latency_ms", "p99"), _aiperf_p99_latency),
    "guidellm": (2, ("llm", "ttft_ms", "p99"), _guidellm_p99_ttft),
    "inference-perf": (2, ("latency_ms", "p99"), _inference_perf_p99_latency),
    "genai-bench": (2, ("latency_ms", "p50"), _genai_p50_latency),
    "perf_analyzer": (2, ("latency_ms", "p99"), _perf_analyzer_p99),
    "loadgen": (1, ("latency_ms", "p99"), _loadgen_p99),
}


@pytest.mark.parametrize("tool", list(CASES))
def test_each_tools_files_become_an_imported_job_with_its_figures_and_no_verdict(leader: Leader, tool: str) -> None:
    points, path, expected = CASES[tool]
    files = fixture_files(tool)
    answer = post_import(leader, files)
    assert answer.status_code == 201, answer.text
    summary = answer.json()
    assert summary["tool"] == tool and summary["points"] == points and summary["files"] == list(files)
    job = leader.client.get(f"/api/v1/jobs/{summary['job_id']}", headers=ADMIN).json()
    assert job["kind"] == "imported" and job["state"] == "succeeded" and job["imported"]["tool"] == tool
    results = leader.client.get(f"/api/v1/jobs/{summary['job_id']}/results", headers=ADMIN).json()["points"]
    assert len(results) == points
    for point in results:
        assert point["valid"] is False and [r["code"] for r in point["reasons"]] == ["not_judged"]
        assert point["imported"]["tool"] == tool and point["imported"]["definitions"]["latency"]
    value: Any = results[0]
    for key in path:
        value = value[key]
    assert value == pytest.approx(expected(), rel=1e-12)
    for name, data in files.items():
        kept = leader.client.get(f"/api/v1/jobs/{summary['job_id']}/imported/{name}", headers=ADMIN)
        assert kept.status_code == 200 and kept.content == data


def test_a_file_of_another_shape_is_refused_naming_the_format_and_the_field_and_nothing_is_stored(leader: Leader) -> None:
    doc = json.loads((FIXTURES / "vllm" / "vllm-bench-serve-4.json").read_text())
    del doc["completed"]
    refused = post_import(leader, {"run.json": json.dumps(doc).encode()}, tool="vllm")
    assert refused.status_code == 422 and refused.json()["field"] == "file"
    assert "not a vllm bench serve result: run.json: field completed missing" in refused.json()["message"]
    lines = fixture_files("aiperf")
    lines["profile_export.jsonl"] = lines["profile_export.jsonl"] + b'{"metadata": 1}\n'
    broken = post_import(leader, lines)
    assert broken.status_code == 422 and "not a AIPerf result: profile_export.jsonl line 17" in broken.json()["message"]
    unknown = post_import(leader, {"x.json": b'{"hello": 1}'})
    assert unknown.status_code == 422 and "not recognised as a result of" in unknown.json()["message"]
    db = leader.db
    assert db["jobs"].count_documents({}) == 0 and db["results"].count_documents({}) == 0
    assert db["imported.files"].count_documents({}) == 0 and db["imported.chunks"].count_documents({}) == 0
