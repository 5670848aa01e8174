"""Trace files through the leader: upload as data format `trace`, and jobs naming one checked at submission."""

from __future__ import annotations

import io

import numpy as np
import pytest

from tests.integration.leader.conftest import ADMIN, YAML, Leader


def _upload(leader: Leader, content: bytes, fmt: str = "trace", name: str = "arrivals") -> dict:  # type: ignore[type-arg]
    response = leader.client.post("/api/v1/data", headers=ADMIN, data={"name": name, "format": fmt},
                                  files={"file": ("trace.csv", content, "text/csv")})  # fmt: skip
    assert response.status_code == 201, response.text
    return response.json()


def _submit(leader: Leader, trace_id: str, data: str = "") -> tuple[int, dict]:  # type: ignore[type-arg]
    spec = f"name: replay\nmodel: ident:1\nload: {{pattern: trace, trace: {{dataset: {trace_id}}}, duration: 2s}}\n{data}"
    response = leader.client.post("/api/v1/jobs", headers={**ADMIN, **YAML}, content=spec)
    return response.status_code, response.json()


def test_trace_upload_records_entries_span_and_rows(leader: Leader) -> None:
    meta = _upload(leader, b"t_ms,input\n0,1\n5,0\n1250,2\n")
    assert (meta["format"], meta["samples"], meta["fields"]) == ("trace", 3, ["input", "t"])
    assert (meta["span_s"], meta["max_input"]) == (1.25, 2)


@pytest.mark.parametrize(
    ("content", "needle"),
    [(b"0.5\n0.1\n", "line 2: offset 0.1 s is earlier"), (b"-1\n", "must be a finite number of seconds >= 0"),
     (b"when\n1\n", "no t (seconds) or t_ms")],
)  # fmt: skip
def test_bad_trace_files_are_422_naming_the_file(leader: Leader, content: bytes, needle: str) -> None:
    response = leader.client.post("/api/v1/data", headers=ADMIN, data={"name": "bad", "format": "trace"},
                                  files={"file": ("t.txt", content, "text/plain")})  # fmt: skip
    assert response.status_code == 422 and response.json()["field"] == "file", response.text
    assert needle in response.json()["message"]
    assert leader.db["data.files"].count_documents({}) == 0


def test_job_naming_a_trace_is_checked_at_submission(leader: Leader) -> None:
    leader.upload_model("ident", "1")
    plain = _upload(leader, b"0\n0.5\n1.0\n")
    status, job = _submit(leader, plain["id"])
    assert status == 201, job
    # stored with the block size its prefix blocks would take (a Mooncake trace's hash_ids; Mooncake's own 512)
    assert job["spec"]["load"]["trace"] == {"dataset": plain["id"], "block_tokens": 512}

    status, body = _submit(leader, "abc123")
    assert (status, body["field"]) == (422, "load.trace.dataset") and "does not exist" in body["message"]

    buf = io.BytesIO()
    np.savez(buf, input=np.zeros((2, 1), np.float32))
    npz = _upload(leader, buf.getvalue(), fmt="npz", name="rows")
    status, body = _submit(leader, npz["id"])
    assert (status, body["field"]) == (422, "load.trace.dataset") and "not a trace" in body["message"]

    # A trace that names request-data rows needs uploaded data with that many rows.
    with_rows = _upload(leader, b"t,input\n0,0\n0.1,5\n")
    status, body = _submit(leader, with_rows["id"])
    assert (status, body["field"]) == (422, "load.trace.dataset") and "names request-data rows" in body["message"]
    status, body = _submit(leader, with_rows["id"], f"data: {{source: upload, id: {npz['id']}}}\n")
    assert (status, body["field"]) == (422, "load.trace.dataset") and "names input row 5" in body["message"]
    # A trace is not request data.
    status, body = _submit(leader, plain["id"], f"data: {{source: upload, id: {plain['id']}}}\n")
    assert (status, body["field"]) == (422, "data.id") and "is a trace" in body["message"]
    assert leader.db["jobs"].count_documents({}) == 1


def test_a_session_trace_is_replayed_only_as_sessions_and_sessions_only_from_one(leader: Leader) -> None:
    """A session trace (Mooncake lines with session_id) uploads with its fields; a job replaying it must ask for its
    sessions (llm.sessions.from_trace), from_trace needs a session trace, and drawn sessions take no trace lengths."""
    from pathlib import Path

    from benchfleet.generate.llmgen import LlamaSpec, generate

    data, _ = generate(LlamaSpec(layers=1, hidden=64, heads=2, kv_heads=2, intermediate=128, vocab=1024, context=512))
    form, files = {"name": "lm", "version": "1", "format": "hf"}, {"file": ("model.zip", data, "application/zip")}
    stored = leader.client.post("/api/v1/models", headers=ADMIN, data=form, files=files)
    assert stored.status_code == 201, stored.text
    sample = Path(__file__).resolve().parents[3] / "docs" / "traces" / "mooncake_sessions.jsonl"
    sessions = _upload(leader, sample.read_bytes(), name="agents")
    assert sessions["fields"] == ["output_tokens", "prompt_tokens", "session_id", "t"]
    assert sessions["samples"] == len(sample.read_text().splitlines())
    lengths = _upload(leader, b"t_ms,prompt_tokens,output_tokens\n0,16,4\n50,20,4\n", name="lengths")

    def submit(trace_id: str, llm: str) -> tuple[int, dict]:  # type: ignore[type-arg]
        spec = (
            f"name: agents\nmodel: lm:1\nbackends: [vllm]\n"
            f"load: {{pattern: trace, trace: {{dataset: {trace_id}}}, duration: 8s}}\nllm: {llm}\n"
        )
        response = leader.client.post("/api/v1/jobs", headers={**ADMIN, **YAML}, content=spec)
        return response.status_code, response.json()

    status, body = submit(sessions["id"], "{output_tokens: 8}")
    assert (status, body["field"]) == (422, "llm.sessions") and "{from_trace: true}" in body["message"], body
    status, body = submit(sessions["id"], "{sessions: {turns: 4}}")
    assert (status, body["field"]) == (422, "llm.sessions"), body
    status, body = submit(lengths["id"], "{sessions: {from_trace: true}}")
    assert (status, body["field"]) == (422, "load.trace.dataset") and "holds no sessions" in body["message"], body
    status, body = submit(lengths["id"], "{sessions: {turns: 4}}")
    assert (status, body["field"]) == (422, "load.trace.dataset") and "draw their own turns" in body["message"], body
    status, body = submit(sessions["id"], "{sessions: {from_trace: true, think_s: 2}}")
    assert (status, body["field"]) == (422, "llm.sessions") and "leave out think_s" in body["message"], body
    assert leader.db["jobs"].count_documents({}) == 0
    status, job = submit(sessions["id"], "{sessions: {from_trace: true}}")
    assert status == 201, job
    assert job["spec"]["llm"]["sessions"]["from_trace"] is True
