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
    # On the leaderboard: each point a row saying which tool measured it, never the best.
    board = leader.client.get("/api/v1/leaderboard", headers=ADMIN, params={"filter": f"job_id={summary['job_id']}"}).json()
    assert [(r["imported"], r["valid"], r["best"]) for r in board["rows"]] == [(tool, False, False)] * points


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


def test_two_tools_runs_compared_on_pattern_and_load_judged_only_when_asked(leader: Leader) -> None:
    """vllm bench serve and AIPerf, both at Poisson 4 req/s against one server: keyed on pattern and load; not judged
    (the gate's exit 6) until asked; asked, each side's figures are benchfleet's recomputed from its own records, and
    the notes say each tool's definitions and how far the recomputation moved each figure. The recommender, which
    reads only judged points, finds no evidence in them."""
    vllm = post_import(leader, fixture_files("vllm")).json()["job_id"]
    aiperf = post_import(leader, fixture_files("aiperf")).json()["job_id"]
    unasked = leader.client.get("/api/v1/compare", headers=ADMIN, params={"a": vllm, "b": aiperf}).json()
    (pair,) = [p for p in unasked["points"] if p["a_index"] is not None and p["b_index"] is not None]
    assert pair["key"] == "poisson|4 req/s" and pair["verdict"] == "not_judged" and unasked["regressions"] == 0
    assert (pair["a_tool"], pair["b_tool"]) == ("vllm", "aiperf") and unasked["not_judged"] == 1
    assert [m["verdict"] for m in pair["llm"]] == ["not_judged"] * 4
    asked = leader.client.get("/api/v1/compare", headers=ADMIN, params={"a": vllm, "b": aiperf, "include_imported": "true"})
    judged = next(p for p in asked.json()["points"] if p["key"] == "poisson|4 req/s")
    assert judged["verdict"] in ("unchanged", "regression", "improvement") and asked.json()["not_judged"] == 0
    a_point = leader.client.get(f"/api/v1/jobs/{vllm}/results", headers=ADMIN).json()["points"][0]
    b_point = leader.client.get(f"/api/v1/jobs/{aiperf}/results", headers=ADMIN).json()["points"][0]
    a_mine, b_mine = a_point["imported"]["recomputed"], b_point["imported"]["recomputed"]
    assert (judged["a_p99_ms"], judged["b_p99_ms"]) == (a_mine["latency_p99_ms"], b_mine["latency_p99_ms"])
    ttft = next(m for m in judged["llm"] if m["metric"] == "ttft_p99_ms")
    assert (ttft["a"], ttft["b"]) == (a_mine["ttft_p99_ms"], b_mine["ttft_p99_ms"])
    notes = judged["definitions"]
    assert "A: measured by vllm bench serve (request rate 4); its latency from its send stamp" in notes[0]
    moved = next(n for n in notes if n.startswith("B: compared by benchfleet's definitions"))
    assert f"ttft p99 {100 * b_mine['shift']['ttft_p99_ms']:+.1f}%" in moved and "16 records" in moved
    assert any(n.startswith("B: achieved 2.89 req/s of the 4 requested") for n in notes)
    advice = leader.client.get("/api/v1/recommend", headers=ADMIN, params={"p99_ms": 1000}).json()
    assert advice["recommendations"] == [] and advice["considered"] == 0 and "no valid point" in advice["missing"]


def test_an_import_that_fails_while_it_is_stored_leaves_nothing(leader: Leader) -> None:
    """The job's document is written last; when it is refused (here: its id is taken), the files, results and
    leaderboard rows written before it are removed."""
    import asyncio
    from datetime import UTC, datetime

    from pymongo import AsyncMongoClient
    from pymongo.errors import DuplicateKeyError

    from common.formats.imports import read
    from leader.jobs.imported import job_document, point_results
    from leader.store import imports as imports_store

    files = fixture_files("guidellm")
    run = read(files)
    now = datetime.now(UTC)
    doc = job_document(run, job_id="broken", name="b", model="m", owner="admin", team="default", files=list(files), now=now)
    leader.db["jobs"].insert_one({"_id": "broken"})  # what refuses the import's document: its id is taken

    async def attempt() -> None:
        client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(leader.settings.mongo_uri)
        try:
            await imports_store.insert_import(
                client[leader.settings.db_name], doc=doc, results=point_results(run, now), files=files
            )
        finally:
            await client.close()

    with pytest.raises(DuplicateKeyError):
        asyncio.run(attempt())
    assert list(leader.db["jobs"].find()) == [{"_id": "broken"}]
    for collection in ("results", "leaderboard", "imported.files", "imported.chunks"):
        assert leader.db[collection].count_documents({}) == 0, collection


def test_exports_for_other_tools_from_the_api(leader: Leader) -> None:
    """A benchfleet job's points as LoadGen's summary (one per point, or the one `point` names); an imported job's and
    an unknown point are refused by name; llm-d's report, for a language model's job only, says so of a tensor one."""
    from tests.integration.leader.analysis_seed import pct, seed_job

    def metrics(backend: str, batch: int, rate: float) -> dict[str, Any]:
        return {"latency_ms": pct(5.0), "achieved_rate": rate}

    leader.upload_model()
    grid = {"backends": ["onnxruntime"], "batches": [1], "rates": [50.0, 100.0]}
    job = seed_job(leader, name="t", p99_slo=10, follower_id="h", metrics=metrics, **grid)
    every = leader.client.get(f"/api/v1/jobs/{job}/export", headers=ADMIN, params={"format": "mlperf"})
    assert every.status_code == 200 and [s["effective_target_qps"] for s in every.json()] == [50, 100]
    one = leader.client.get(f"/api/v1/jobs/{job}/export", headers=ADMIN, params={"format": "mlperf", "point": 1}).json()
    assert one["benchfleet_point"] == 1 and one["result_99.00_percentile_latency_ns"] == 5_000_000
    missing = leader.client.get(f"/api/v1/jobs/{job}/export", headers=ADMIN, params={"format": "mlperf", "point": 7})
    assert missing.status_code == 404 and missing.json()["field"] == "point"
    tensor = leader.client.get(f"/api/v1/jobs/{job}/export", headers=ADMIN, params={"format": "llm-d"})
    assert tensor.status_code == 400 and tensor.json()["field"] == "format"
    imported = post_import(leader, fixture_files("guidellm")).json()["job_id"]
    refused = leader.client.get(f"/api/v1/jobs/{imported}/export", headers=ADMIN, params={"format": "llm-d"})
    assert refused.status_code == 400 and refused.json()["field"] == "job_id"


def test_an_imported_job_is_deleted_whole_and_an_oversized_import_is_refused(leader: Leader) -> None:
    """Deleting an imported job removes its kept files with its results and rows; files past the import's bound are a
    413 naming the bound before the body is read (as every upload), and leave nothing."""
    job = post_import(leader, fixture_files("perf_analyzer")).json()["job_id"]
    footprint = leader.client.delete(f"/api/v1/jobs/{job}", headers=ADMIN).json()
    assert footprint["kinds"]["imported files"]["documents"] == 1 and footprint["kinds"]["leaderboard rows"]["documents"] == 2
    for collection in ("jobs", "results", "leaderboard", "imported.files", "imported.chunks"):
        assert leader.db[collection].count_documents({}) == 0, collection
    big = {"a.json": b" " * (40 * 1024 * 1024), "b.json": b" " * (30 * 1024 * 1024)}
    refused = post_import(leader, big)
    assert (
        refused.status_code == 413 and f"exceeds the limit of {64 * 1024 * 1024 + 64 * 1024} bytes" in refused.json()["message"]
    )
    assert leader.db["jobs"].count_documents({}) == 0
