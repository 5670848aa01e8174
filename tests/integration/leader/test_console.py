"""The console's server side: a web session writes only with its CSRF token; the jobs list's filters (page and API
alike, the caller's team always its scope); "copy as YAML" submits the job again as it ran."""

from __future__ import annotations

import re
from typing import Any

import pytest

from common.spec.parse import parse_spec_yaml
from common.wire.jobs import JobView, as_ran
from leader.api import conditional
from leader.auth.tokens import CSRF_HEADER, SESSION_COOKIE
from leader.web.submit import templates
from tests.integration.leader.conftest import ADMIN, Leader
from tests.unit.leader.onnx_models import identity_model

pytestmark = pytest.mark.integration

SPEC = (
    "name: {name}\nmodel: {model}\nbackends: [{backend}]\nbatch_sizes: [1]\n"
    "load: {{allow_short: true, rate: [10], duration: 2s}}\n"
)
YAML = {"Content-Type": "application/yaml"}


def _login(leader: Leader, token: str) -> tuple[dict[str, str], str]:
    """A web session's cookie and the CSRF token its pages carry."""
    answer = leader.client.post("/login", data={"token": token, "next": "/jobs"}, follow_redirects=False)
    assert answer.status_code == 303, answer.text
    cookies = {SESSION_COOKIE: answer.cookies[SESSION_COOKIE]}
    leader.client.cookies.clear()
    page = leader.client.get("/jobs", cookies=cookies)
    assert page.status_code == 200, page.text
    found = re.search(r'<meta name="csrf-token" content="([0-9a-f]{64})">', page.text)
    assert found, "the page carries no CSRF token"
    assert found.group(1) in re.search(r'name="csrf" value="([0-9a-f]+)"', page.text).group(1)  # type: ignore[union-attr]
    return cookies, found.group(1)


def _token(leader: Leader, user: str, role: str, team: str) -> str:
    made = leader.client.post("/api/v1/tokens", headers=ADMIN, json={"user": user, "role": role, "team": team})
    assert made.status_code == 201, made.text
    return str(made.json()["token"])


def _submit(leader: Leader, headers: dict[str, str], *, name: str, model: str, backend: str = "onnxruntime") -> str:
    body = SPEC.format(name=name, model=model, backend=backend)
    answer = leader.client.post("/api/v1/jobs", headers={**headers, **YAML}, content=body)
    assert answer.status_code == 201, answer.text
    return str(answer.json()["id"])


def test_a_web_session_writes_only_with_its_csrf_token(leader: Leader) -> None:
    leader.upload_model()
    job_id = leader.submit()["id"]
    cookies, csrf = _login(leader, ADMIN["Authorization"].split()[1])
    cancel = f"/api/v1/jobs/{job_id}/cancel"
    # The cookie alone (what another site's form or script makes the browser send) is refused, naming the header.
    bare = leader.client.post(cancel, cookies=cookies)
    assert bare.status_code == 403 and bare.json()["field"] == CSRF_HEADER, bare.text
    wrong = leader.client.post(cancel, cookies=cookies, headers={CSRF_HEADER: "0" * 64})
    assert wrong.status_code == 403 and wrong.json()["field"] == CSRF_HEADER, wrong.text
    assert leader.job(job_id)["state"] in {"queued", "assigned"}  # nothing happened
    # Another session's token does not fit this one.
    _other_cookies, other_csrf = _login(leader, ADMIN["Authorization"].split()[1])
    crossed = leader.client.post(cancel, cookies=cookies, headers={CSRF_HEADER: other_csrf})
    assert crossed.status_code == 403, crossed.text
    done = leader.client.post(cancel, cookies=cookies, headers={CSRF_HEADER: csrf})
    assert done.status_code == 200 and done.json()["state"] == "cancelled", done.text
    # The logout form too: without the token the session lives on.
    refused = leader.client.post("/logout", cookies=cookies, follow_redirects=False)
    assert refused.status_code == 403 and leader.client.get("/jobs", cookies=cookies, follow_redirects=False).status_code == 200
    out = leader.client.post("/logout", cookies=cookies, data={"csrf": csrf}, follow_redirects=False)
    assert out.status_code == 303 and leader.client.get("/jobs", cookies=cookies, follow_redirects=False).status_code == 303


def test_a_viewer_session_is_refused_writes_even_with_its_token(leader: Leader) -> None:
    leader.upload_model()
    job_id = leader.submit()["id"]
    cookies, csrf = _login(leader, _token(leader, "val", "viewer", "default"))
    page = leader.client.get("/jobs", cookies=cookies)
    assert job_id in page.text and 'data-action="cancel"' not in page.text and 'data-action="rerun"' not in page.text
    refused = leader.client.post(f"/api/v1/jobs/{job_id}/cancel", cookies=cookies, headers={CSRF_HEADER: csrf})
    assert refused.status_code == 403, refused.text
    submitted = leader.client.post("/api/v1/jobs", cookies=cookies, headers={CSRF_HEADER: csrf, **YAML}, content="name: x\n")
    assert submitted.status_code == 403, submitted.text
    assert leader.job(job_id)["state"] in {"queued", "assigned"}


def _rows(text: str) -> list[str]:
    return re.findall(r'<tr class="job state-\w+" data-job="([0-9a-f]+)"', text)


def test_the_jobs_list_filters_in_the_callers_scope(leader: Leader) -> None:
    admin_alpha = _token(leader, "ann", "submitter", "alpha")
    alpha = {"Authorization": f"Bearer {admin_alpha}"}
    beta = {"Authorization": f"Bearer {_token(leader, 'bob', 'submitter', 'beta')}"}
    for headers, name in ((alpha, "ma"), (beta, "mb")):
        answer = leader.client.post(
            "/api/v1/models",
            headers=headers,
            data={"name": name, "version": "1"},
            files={"file": ("model.onnx", identity_model(), "application/octet-stream")},
        )
        assert answer.status_code == 201, answer.text
    a1 = _submit(leader, alpha, name="a1", model="ma:1")
    a2 = _submit(leader, alpha, name="a2", model="ma:1", backend="torchscript")
    b1 = _submit(leader, beta, name="b1", model="mb:1")
    leader.client.post(f"/api/v1/jobs/{a2}/cancel", headers=alpha)
    admin_cookies, _ = _login(leader, ADMIN["Authorization"].split()[1])

    def listed(cookies: dict[str, str], **params: str) -> list[str]:
        page = leader.client.get("/jobs", cookies=cookies, params=params)
        assert page.status_code == 200, page.text
        api = leader.client.get("/api/v1/jobs", cookies=cookies, params=params)
        assert api.status_code == 200, api.text
        rows = _rows(page.text)
        assert rows == [j["id"] for j in api.json()]  # the page and the API select alike
        return rows

    assert listed(admin_cookies) == [b1, a2, a1]  # newest first, every team for an admin
    assert listed(admin_cookies, team="alpha") == [a2, a1]
    assert listed(admin_cookies, owner="bob") == [b1]
    assert listed(admin_cookies, state="cancelled") == [a2]
    assert listed(admin_cookies, model="ma") == [a2, a1] == listed(admin_cookies, model="ma:1")
    assert listed(admin_cookies, model="m") == []  # a name, not a prefix
    assert listed(admin_cookies, backend="torchscript") == [a2]
    assert listed(admin_cookies, since="2000-01-01") == [b1, a2, a1] and listed(admin_cookies, since="2999-01-01") == []
    # Paged: a page of one names the next (filters kept), which holds the next older job.
    first = leader.client.get("/jobs", cookies=admin_cookies, params={"limit": "1"})
    assert _rows(first.text) == [b1]
    older = re.search(r'id="next-page" href="([^"]+)"', first.text)
    assert older is not None and "limit=1" in older.group(1)
    second = leader.client.get(older.group(1).replace("&amp;", "&"), cookies=admin_cookies)
    assert _rows(second.text) == [a2]
    bad_limit = leader.client.get("/jobs", cookies=admin_cookies, params={"limit": "0"})
    assert bad_limit.status_code == 400 and 'data-field="limit"' in bad_limit.text
    alpha_cookies, _ = _login(leader, admin_alpha)
    assert listed(alpha_cookies) == [a2, a1]
    assert listed(alpha_cookies, team="beta") == []  # a team filter never widens a user's scope
    # A bad filter is a 4xx naming it, on the page and over the API.
    page = leader.client.get("/jobs", cookies=admin_cookies, params={"state": "sleeping"})
    assert page.status_code == 400 and 'data-field="state"' in page.text, page.text
    api = leader.client.get("/api/v1/jobs", headers=ADMIN, params={"since": "yesterday"})
    assert api.status_code == 422 and "since" in api.text, api.text


def test_the_yaml_submits_the_job_again_as_it_ran(leader: Leader) -> None:
    leader.upload_model()
    spec = SPEC.format(name="y", model="ident", backend="onnxruntime") + "seed: 7\nserver: {threads: 2}\n"
    job = leader.submit(text=spec)
    leader.upload_model(version="2")  # "ident" now means version 2: the YAML must pin the version that ran
    cookies, _ = _login(leader, ADMIN["Authorization"].split()[1])
    answer = leader.client.get(f"/jobs/{job['id']}/spec.yaml", cookies=cookies)
    assert answer.status_code == 200 and answer.headers["content-type"].startswith("application/yaml"), answer.text
    parsed = parse_spec_yaml(answer.text)
    expected: Any = as_ran(JobView.model_validate(job))
    assert parsed == expected and parsed.model.ref == "ident:1" and parsed.seed == 7
    again = leader.client.post("/api/v1/jobs", headers={**ADMIN, **YAML}, content=answer.text)
    assert again.status_code == 201 and again.json()["model_ref"] == "ident:1", again.text
    missing = leader.client.get("/jobs/0123456789abcdef0123456789abcdef/spec.yaml", cookies=cookies)
    assert missing.status_code == 404
    # Every setting as it ran, the defaults and the seed too (a default left out follows a later version's).
    plain = leader.submit(text=SPEC.format(name="plain", model="ident:1", backend="onnxruntime"))
    shown = leader.client.get(f"/jobs/{plain['id']}/spec.yaml", cookies=cookies).text
    assert "seed: 0" in shown and "warmup: 2.0" in shown and "pattern: poisson" in shown, shown
    assert parse_spec_yaml(shown) == as_ran(JobView.model_validate(plain))
    again = leader.client.post("/api/v1/jobs", headers={**ADMIN, **YAML}, content=shown)
    assert again.status_code == 201, again.text


def test_a_preview_checks_like_a_submission_and_stores_nothing(leader: Leader) -> None:
    leader.upload_model()
    leader.register("f1")
    spec = SPEC.format(name="p", model="ident:1", backend="onnxruntime")

    def both(body: str) -> tuple[Any, Any]:
        preview = leader.client.post("/api/v1/jobs/preview", headers={**ADMIN, **YAML}, content=body)
        return preview, leader.client.post("/api/v1/jobs", headers={**ADMIN, **YAML}, content=body)

    answer = leader.client.post("/api/v1/jobs/preview", headers={**ADMIN, **YAML}, content=spec)
    assert answer.status_code == 200, answer.text
    seen = answer.json()
    assert seen["follower_id"] == "f1" and seen["points"] == 1 and seen["jobs_ahead"] == 0 and seen["estimate_s"] > 0
    assert leader.db.jobs.count_documents({}) == 0  # stored nothing
    # A bad spec: the preview's refusal is the submission's, word for word, field for field; nothing stored.
    for bad in (spec.replace("rate: [10]", "rate: [-5]"), spec.replace("ident:1", "absent:1"), "name: [x\n"):
        preview, submitted = both(bad)
        assert preview.status_code == submitted.status_code >= 400 and preview.json() == submitted.json(), preview.text
    assert leader.db.jobs.count_documents({}) == 0
    # A point too short for its p99 (10 req/s for 2 s: 20 requests): refused in the preview as at submission, naming
    # the shortest duration that would do; asked for anyway, it is accepted.
    short = spec.replace("allow_short: true, ", "")
    preview, submitted = both(short)
    assert preview.status_code == submitted.status_code == 422 and preview.json() == submitted.json(), preview.text
    assert preview.json()["field"] == "load.duration" and "at least 45.9 s" in preview.json()["message"], preview.text
    assert leader.db.jobs.count_documents({}) == 0
    assert leader.client.post("/api/v1/jobs/preview", headers={**ADMIN, **YAML}, content=spec).status_code == 200
    # No follower offers triton: where it would wait, and why.
    waiting = leader.client.post("/api/v1/jobs/preview", headers={**ADMIN, **YAML}, content=spec.replace("onnxruntime", "triton"))
    assert waiting.status_code == 200 and waiting.json()["follower_id"] is None and "triton" in waiting.json()["waiting_reason"]
    # Two jobs on f1 first: the next one would run after them, once their estimates have passed.
    first, second = leader.submit()["id"], leader.submit()["id"]
    estimates = [leader.wait_state(j, "assigned")["estimate_s"] for j in (first, second)]
    later = leader.client.post("/api/v1/jobs/preview", headers={**ADMIN, **YAML}, content=spec).json()
    assert (
        later["follower_id"] == "f1"
        and later["jobs_ahead"] == 2
        and later["start_in_s"] == pytest.approx(sum(estimates), abs=0.2)
    )
    viewer = {"Authorization": f"Bearer {_token(leader, 'vee', 'viewer', 'default')}"}
    assert leader.client.post("/api/v1/jobs/preview", headers={**viewer, **YAML}, content=spec).status_code == 403


def test_every_template_is_a_valid_job() -> None:
    """Valid by construction: each template parses, and each of its points is long enough to hold its p99."""
    for name, text in templates(None, None).items():
        spec = parse_spec_yaml(text)
        assert spec.name and spec.load.p99_shortfall() is None, (name, spec.load.p99_shortfall())


def test_a_missing_job_is_a_page_and_a_waiting_job_says_why(leader: Leader) -> None:
    """An unknown (or another team's) job, or a point a job lacks, is a page saying so with its status, not the API's
    JSON; a job no follower can run says why on its page (it once said "waiting for the first window…")."""
    leader.upload_model()
    cookies, _ = _login(leader, ADMIN["Authorization"].split()[1])
    unknown = leader.client.get("/jobs/0123456789abcdef0123456789abcdef", cookies=cookies)
    assert unknown.status_code == 404 and unknown.headers["content-type"].startswith("text/html"), unknown.text
    assert 'id="not-found"' in unknown.text and "does not exist" in unknown.text
    leader.register("f-cpu", backends=["onnxruntime"])
    job_id = _submit(leader, ADMIN, name="waits", model="ident", backend="tfserving")
    reason = leader.wait_for(job_id, lambda job: bool(job.get("waiting_reason")))["waiting_reason"]
    assert "needs backends tfserving" in reason, reason
    page = leader.client.get(f"/jobs/{job_id[:8]}", cookies=cookies)  # the 8 characters the console shows
    assert page.status_code == 200 and re.search(r'<p class="waiting" id="job-waiting">', page.text), page.text
    assert reason in page.text.replace("&#39;", "'")
    no_point = leader.client.get(f"/jobs/{job_id}/points/3", cookies=cookies)
    assert no_point.status_code == 404 and f"job {job_id} has no point 3" in no_point.text


def test_a_login_posted_from_another_site_is_refused_and_pages_cannot_be_framed(leader: Leader) -> None:
    """Login CSRF: a form on another site posting the attacker's token would log this browser into the attacker's
    account. The browser's Sec-Fetch-Site (or, from an older browser, its Origin) says where the form was: another
    site's is refused, with no session; the leader's own page, a typed URL and the CLI (neither header) log in."""
    token = ADMIN["Authorization"].split()[1]
    form = {"token": token, "next": "/jobs"}
    foreigns = [{"Sec-Fetch-Site": "cross-site"}, {"Sec-Fetch-Site": "same-site"}, {"Origin": "https://evil.example"}]
    for foreign in [*foreigns, {"Origin": "null"}]:
        leader.client.cookies.clear()
        refused = leader.client.post("/login", data=form, headers=foreign, follow_redirects=False)
        assert refused.status_code == 403 and SESSION_COOKIE not in refused.cookies, (foreign, refused.status_code)
        assert "log in from this leader&#39;s own login page" in refused.text, refused.text
    owns = [{"Sec-Fetch-Site": "same-origin", "Origin": "http://testserver"}, {"Sec-Fetch-Site": "none"}]
    for own in [*owns, {"Origin": "http://testserver"}, {}]:
        leader.client.cookies.clear()
        answer = leader.client.post("/login", data=form, headers=own, follow_redirects=False)
        assert answer.status_code == 303 and SESSION_COOKIE in answer.cookies, (own, answer.status_code)
    # Framing, sniffing and referrers: on the pages and on the API alike.
    leader.client.cookies.clear()
    for path in ("/login", "/api/v1/jobs", "/healthz"):
        headers = leader.client.get(path, headers=ADMIN if path.startswith("/api") else {}).headers
        assert headers["x-frame-options"] == "DENY" and headers["content-security-policy"] == "frame-ancestors 'none'"
        assert headers["x-content-type-options"] == "nosniff" and headers["referrer-policy"] == "same-origin"


def test_the_jobs_rows_the_page_polls_are_304_until_they_change(leader: Leader, monkeypatch: pytest.MonkeyPatch) -> None:
    """The Jobs page's script asks for its rows every 3 s; the browser sends back the rows' ETag (they are
    `Cache-Control: private, no-cache`): 304 with no body while nothing they show changed, the new rows once a job is
    submitted. Another user's rows (what they may cancel differs) have their own ETag."""
    monkeypatch.setattr(conditional, "STALE_AFTER_S", 1e9)  # (the clock's own window never ticks mid-test)
    leader.upload_model()
    cookies, _ = _login(leader, ADMIN["Authorization"].split()[1])
    first = leader.submit()["id"]
    # The placer's book takes the job in at its next tick, a moment after the reply: the rows' ETag names the book's
    # version, so it is read once the job has its place.
    leader.wait_for(first, lambda job: job["queue_position"] is not None)
    rows = leader.client.get("/jobs?fragment=1", cookies=cookies)
    assert rows.status_code == 200 and first in rows.text
    tag = rows.headers["ETag"]
    assert rows.headers["Cache-Control"] == "private, no-cache"
    again = leader.client.get("/jobs?fragment=1", cookies=cookies, headers={"If-None-Match": tag})
    assert (again.status_code, again.content) == (304, b"")
    viewer_cookies, _ = _login(leader, _token(leader, "vera", "viewer", "default"))
    theirs = leader.client.get("/jobs?fragment=1", cookies=viewer_cookies, headers={"If-None-Match": tag})
    assert theirs.status_code == 200 and first in theirs.text and theirs.headers["ETag"] != tag
    second = leader.submit()["id"]
    changed = leader.client.get("/jobs?fragment=1", cookies=cookies, headers={"If-None-Match": tag})
    assert changed.status_code == 200 and second in changed.text and changed.headers["ETag"] != tag
