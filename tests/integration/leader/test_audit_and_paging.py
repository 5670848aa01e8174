"""Who did what is kept (admins read it); long lists come a page at a time with a cursor."""

from __future__ import annotations

import uuid
from datetime import datetime

from tests.integration.leader.conftest import ADMIN, Leader
from tests.integration.leader.test_scheduling import fid


def test_changes_are_audited_with_who_made_them_and_routine_follower_traffic_is_not(leader: Leader) -> None:
    made = leader.client.post("/api/v1/tokens", headers=ADMIN, json={"user": "sue", "role": "submitter"}).json()
    sue = {"Authorization": f"Bearer {made['token']}"}
    leader.upload_model()
    job = leader.client.post("/api/v1/jobs", headers={**sue, "Content-Type": "application/yaml"},
                             content="name: a\nmodel: ident:1\nbackends: [onnxruntime]\nbatch_sizes: [1]\n"
                                     "load: {allow_short: true, rate: 5, duration: 1s, warmup: 0s}\n")  # fmt: skip
    assert job.status_code == 201, job.text
    refused = leader.client.delete("/api/v1/models/ident/1", headers={"Authorization": "Bearer not-a-token-000000"})
    assert refused.status_code == 401
    follower, incarnation = fid(), uuid.uuid4().hex
    leader.register(follower, incarnation)
    for _ in range(3):
        assert leader.heartbeat(follower, incarnation)

    rows = leader.client.get("/api/v1/audit", headers=ADMIN).json()
    seen = [(r["user"], r["method"], r["path"], r["status"]) for r in rows]
    assert ("sue", "POST", "/api/v1/jobs", 201) in seen
    assert ("admin", "POST", "/api/v1/tokens", 201) in seen
    assert (None, "DELETE", "/api/v1/models/ident/1", 401) in seen  # refused attempts are kept
    assert ("join", "POST", "/api/v1/followers/register", 200) in seen
    assert not any(path.endswith("/heartbeat") for _, _, path, _ in seen)  # a follower's routine traffic is not
    assert made["token"] not in str(rows)
    assert [r["user"] for r in leader.client.get("/api/v1/audit?user=sue", headers=ADMIN).json()] == ["sue"]
    assert leader.client.get("/api/v1/audit", headers=sue).status_code == 403  # admins only


def test_jobs_list_pages_with_a_cursor_through_more_than_one_page(leader: Leader) -> None:
    leader.upload_model()
    submitted = [leader.submit()["id"] for _ in range(7)]
    seen: list[str] = []
    url = "/api/v1/jobs?limit=3"
    pages = 0
    while url:
        answer = leader.client.get(url, headers=ADMIN)
        assert answer.status_code == 200, answer.text
        seen += [job["id"] for job in answer.json()]
        pages += 1
        link = answer.headers.get("Link")
        url = link[1:link.index(">")].split("://", 1)[1].split("/", 1)[1] if link else ""
        url = "/" + url if url else ""
    assert pages == 3 and sorted(seen) == sorted(submitted) and len(seen) == len(set(seen)) == 7
    # Compared as instants: the JSON drops a zero fraction ("…:47Z" beside "…:47.030000Z"), which sorts wrongly as text.
    created = [datetime.fromisoformat(leader.job(job_id)["created_at"]) for job_id in seen]
    assert created == sorted(created, reverse=True)  # newest first across pages
    bad = leader.client.get("/api/v1/jobs?cursor=bm90LWEtY3Vyc29y", headers=ADMIN)
    assert bad.status_code in (400, 422) and bad.json()["field"] == "cursor"
