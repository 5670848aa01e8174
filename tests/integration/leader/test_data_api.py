"""Request data: upload (npz, JSONL, zip of images) with format checks, list/get/download/delete, jobs that name it."""

from __future__ import annotations

import hashlib
import io
import json
import zipfile

import numpy as np
import pytest

from tests.integration.leader.conftest import ADMIN, YAML, Leader


def _npz(**arrays: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **arrays)  # type: ignore[arg-type]
    return buf.getvalue()


def _images_zip() -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for i in range(2):
            png = io.BytesIO()
            Image.fromarray(np.full((8, 8, 3), 40 * i, dtype=np.uint8)).save(png, format="PNG")
            zf.writestr(f"img{i}.png", png.getvalue())
    return buf.getvalue()


def _upload(leader: Leader, content: bytes, fmt: str, name: str = "reqs"):  # type: ignore[no-untyped-def]
    return leader.client.post("/api/v1/data", headers=ADMIN, data={"name": name, "format": fmt},
                              files={"file": ("data.bin", content, "application/octet-stream")})  # fmt: skip


@pytest.mark.parametrize(
    ("fmt", "content", "samples", "fields"),
    [
        ("npz", _npz(input=np.zeros((5, 3), np.float32)), 5, ["input"]),
        ("jsonl", b'{"input": [1, 2, 3]}\n{"input": [4, 5, 6]}\n', 2, ["input"]),
        ("images", _images_zip(), 2, ["image"]),
    ],
)
def test_upload_list_get_download_delete(leader: Leader, fmt: str, content: bytes, samples: int, fields: list[str]) -> None:
    response = _upload(leader, content, fmt)
    assert response.status_code == 201, response.text
    meta = response.json()
    assert (meta["format"], meta["samples"], meta["fields"]) == (fmt, samples, fields)
    assert meta["sha256"] == hashlib.sha256(content).hexdigest() and meta["size_bytes"] == len(content)
    assert [d["id"] for d in leader.client.get("/api/v1/data", headers=ADMIN).json()] == [meta["id"]]
    assert leader.client.get(f"/api/v1/data/{meta['id']}", headers=ADMIN).json() == meta
    download = leader.client.get(f"/api/v1/data/{meta['id']}/file", headers=ADMIN)
    assert download.content == content and download.headers["X-Benchfleet-Sha256"] == meta["sha256"]
    assert leader.client.delete(f"/api/v1/data/{meta['id']}", headers=ADMIN).status_code == 204
    assert leader.client.get(f"/api/v1/data/{meta['id']}", headers=ADMIN).status_code == 404
    assert leader.db["data.files"].count_documents({}) == 0


@pytest.mark.parametrize(
    ("fmt", "content", "needle"),
    [
        ("npz", b"not a zip at all", "npz"),
        ("npz", _npz(a=np.zeros((2, 1)), b=np.zeros((3, 1))), "disagree"),
        ("jsonl", b'{"input": [1]}\nnot json\n', "line 2"),
        ("jsonl", json.dumps([1, 2]).encode(), "object"),
        ("images", _npz(a=np.zeros(2)), "no .png/.jpg"),
        ("csv", b"a,b\n", "must be one of"),
        # Found by the schemathesis fuzz: bytes that are not UTF-8, a zip whose member is not a .npy array.
        ("jsonl", b'{"a": 1}\n\xf2\x81', "UTF-8"),
        ("npz", _images_zip(), "not a .npy array"),
        # Labels are each sample's class: one whole number per sample.
        ("npz", _npz(input=np.zeros((2, 3)), labels=np.zeros((2, 1), np.int64)), "'labels' holds each sample's class"),
        ("npz", _npz(input=np.zeros((2, 3)), labels=np.zeros(2)), "one integer per sample, not float64[2]"),
        ("jsonl", b'{"input": [1], "label": 0}\n{"input": [2], "label": "cat"}\n', "line 2: a label is the sample's class"),
        ("jsonl", b'{"input": [1], "label": -1}\n', "a whole number 0..99999 (not -1)"),
    ],
)
def test_bad_data_is_refused_before_storage_naming_the_field(leader: Leader, fmt: str, content: bytes, needle: str) -> None:
    response = _upload(leader, content, fmt)
    assert response.status_code == 422, response.text
    body = response.json()
    assert body["field"] in ("file", "format") and needle in body["message"], body
    assert leader.db["data.files"].count_documents({}) == 0 and leader.db["data.chunks"].count_documents({}) == 0


def test_bad_name_and_oversize_are_4xx(make_leader) -> None:  # type: ignore[no-untyped-def]
    leader = make_leader(max_upload_bytes=1000)
    bad = _upload(leader, b'{"a": 1}\n', "jsonl", name="../etc")
    assert bad.status_code == 422 and bad.json()["field"] == "name"
    big = _upload(leader, b'{"a": 1}\n' * 500, "jsonl", name="big")
    assert big.status_code == 413, big.text


def test_job_naming_an_unknown_data_set_is_refused(leader: Leader) -> None:
    leader.upload_model("ident", "1")
    spec = "name: j\nmodel: ident:1\nload: {allow_short: true, rate: 10, duration: 1s}\ndata: {source: upload, id: abc123}\n"
    response = leader.client.post("/api/v1/jobs", headers={**ADMIN, **YAML}, content=spec)
    assert response.status_code == 422 and response.json()["field"] == "data.id", response.text


def test_quality_accuracy_needs_a_labelled_data_set(leader: Leader) -> None:
    """The job's quality check is refused at submission, naming quality.accuracy, when its data carries no labels; a
    labelled set's labels are a field of the set, and the job that scores it is accepted."""
    leader.upload_model("ident", "1")
    bare = _upload(leader, _npz(input=np.zeros((4, 3), np.float32)), "npz", "bare").json()
    labelled = _upload(leader, _npz(input=np.zeros((4, 3), np.float32), labels=np.arange(4)), "npz", "labelled").json()
    assert labelled["fields"] == ["input", "labels"] and labelled["samples"] == 4
    spec = "name: j\nmodel: ident:1\nload: {{allow_short: true, rate: 10, duration: 1s}}\n"
    spec += "data: {{source: upload, id: {}}}\nquality: {{}}\n"
    refused = leader.client.post("/api/v1/jobs", headers={**ADMIN, **YAML}, content=spec.format(bare["id"]))
    assert refused.status_code == 422, refused.text
    assert refused.json()["field"] == "quality.accuracy" and "carries no labels" in refused.json()["message"]
    accepted = leader.client.post("/api/v1/jobs", headers={**ADMIN, **YAML}, content=spec.format(labelled["id"]))
    assert accepted.status_code == 201, accepted.text
    assert accepted.json()["spec"]["quality"] == {
        "accuracy": {"top_k": 5},
        "regression": False,
        "evaluation": None,
        "agreement": False,
        "max_samples": None,  # unset: the model's kind says (1,000 samples for a tensor model)
        "min_accuracy": None,
        "answer_tokens": 32,
    }
