"""The console in a real browser (Playwright driving Debian's chromium against a real leader over HTTP): the jobs list
(filter, live refresh, cancel, re-run, copy as YAML) and the fleet (drain, resume), as an admin and as a viewer."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from common.spec.parse import parse_spec_yaml
from common.wire.imports import TOOL_NAMES
from tests.e2e.web.browser import NEEDS_CHROMIUM, logged_in, serve
from tests.integration.leader.analysis_seed import pct, seed_job
from tests.integration.leader.conftest import ADMIN, ADMIN_TOKEN, SPEC_YAML, Leader
from tests.integration.leader.test_imports import FIXTURES
from tests.unit.leader.onnx_models import identity_model

pytestmark = [pytest.mark.e2e, NEEDS_CHROMIUM]

WIDTH = 1400


@pytest.fixture
def console(make_leader: Callable[..., Leader], chromium: Any) -> Iterator[dict[str, Any]]:
    """A finished job (its points reported by a registered agent), a job waiting on that agent, the leader over HTTP.
    The agent does not beat: it stays alive, and the waiting job on it, for as long as a test takes."""
    leader = make_leader(missing_after_s=600, undelivered_after_s=600)
    leader.upload_model()

    def metrics(backend: str, batch: int, rate: float) -> dict[str, Any]:
        return {"latency_ms": pct(5.0 if rate < 60 else 30.0), "achieved_rate": rate}

    grid: dict[str, Any] = {"backends": ["onnxruntime"], "batches": [1], "rates": [50, 100]}
    done = seed_job(leader, name="finished", p99_slo=10, follower_id="host0", metrics=metrics, **grid)
    waiting = leader.submit()["id"]
    leader.wait_state(waiting, "assigned")
    with serve(leader.settings) as url:
        yield {"url": url, "done": done, "waiting": waiting, "leader": leader, "browser": chromium}


def _fits(page: Any) -> None:
    """No sideways scrolling at 1,400 px: not the page, not a table in its scroll box."""
    assert page.evaluate("document.documentElement.scrollWidth") <= WIDTH
    boxes = page.evaluate("Array.from(document.querySelectorAll('.scroll')).map(e => [e.scrollWidth, e.clientWidth])")
    assert all(inner <= outer for inner, outer in boxes), boxes


def _state(page: Any, job_id: str) -> str:
    return str(page.locator(f'tr[data-job="{job_id}"] td.job-state').inner_text())


def test_an_admin_lists_filters_cancels_reruns_copies_and_drains(console: dict[str, Any], artifacts_dir: Path) -> None:
    leader: Leader = console["leader"]
    shots = artifacts_dir / "web"
    shots.mkdir(exist_ok=True)
    url, done, waiting = console["url"], console["done"], console["waiting"]
    with logged_in(console["browser"], url, ADMIN_TOKEN) as page:
        page.goto(url + "/jobs")
        page.wait_for_selector(f'tr[data-job="{done}"]')
        assert _state(page, done) == "succeeded" and _state(page, waiting) == "assigned"
        done_row = page.locator(f'tr[data-job="{done}"]')
        assert done_row.locator("td.job-verdict").inner_text() == "2/2 points valid, 1 within the SLO"
        waiting_row = page.locator(f'tr[data-job="{waiting}"]')
        agent = leader.job(waiting)["follower_id"]
        assert agent in waiting_row.locator("td.job-where").inner_text()
        assert waiting_row.locator("td.job-start").inner_text().startswith("~")  # the placer's estimate
        _fits(page)
        page.screenshot(path=str(shots / "console-jobs.png"))

        # A job submitted elsewhere appears without reloading (the list refreshes while visible).
        page.evaluate("window.__same_page = true")
        later = leader.submit()["id"]
        page.wait_for_selector(f'tr[data-job="{later}"]', timeout=15_000)
        assert page.evaluate("window.__same_page") is True

        # From the keyboard: into the model filter, type, Enter submits the form.
        page.focus("#f-model")
        page.keyboard.type("ident")
        page.keyboard.press("Enter")
        page.wait_for_url("**model=ident**")
        assert page.locator("tr.job").count() == 3
        page.select_option("#f-state", "succeeded")
        page.click("#filter-submit")
        page.wait_for_url("**state=succeeded**")
        assert page.locator("tr.job").count() == 1 and _state(page, done) == "succeeded"

        # Copy as YAML: the job as it ran, which parses back to a spec pinned to the version it ran.
        page.click(f'tr[data-job="{done}"] [data-action="yaml"]')
        page.wait_for_selector("#yaml-dialog[open]")
        spec = parse_spec_yaml(page.input_value("#yaml-text"))
        assert spec.model.ref == "ident:1" and spec.name == "finished"
        page.click("#yaml-close")

        # Cancel from the list: the row says so after the refresh, and the API agrees.
        page.goto(url + "/jobs")
        asked: list[str] = []
        page.once("dialog", lambda dialog: (asked.append(dialog.message), dialog.dismiss()))
        page.click(f'tr[data-job="{waiting}"] [data-action="cancel"]')  # asked first; dismissed, nothing happens
        page.wait_for_function("() => !document.querySelector('[data-action=\"cancel\"][disabled]')")
        assert asked == [f"Cancel job {waiting}? A running point stops where it is."], asked
        assert leader.job(waiting)["state"] != "cancelled"
        page.once("dialog", lambda dialog: dialog.accept())
        page.click(f'tr[data-job="{waiting}"] [data-action="cancel"]')
        page.wait_for_function(
            f"document.querySelector('tr[data-job=\"{waiting}\"] td.job-state').textContent === 'cancelled'", timeout=15_000
        )
        assert leader.job(waiting)["state"] == "cancelled"
        assert page.locator(f'tr[data-job="{waiting}"] [data-action="cancel"]').count() == 0
        assert page.locator("#console-error").is_hidden()

        # Re-run from the job page: a new job, the same spec as it ran, and its page opens.
        page.goto(f"{url}/jobs/{done}")
        page.click('[data-action="rerun"]')
        page.wait_for_url(lambda target: "/jobs/" in target and done not in target)
        new_id = page.url.rsplit("/", 1)[1]
        rerun = leader.job(new_id)
        assert rerun["model_ref"] == "ident:1" and rerun["spec"]["load"] == leader.job(done)["spec"]["load"]
        page.screenshot(path=str(shots / "console-rerun-job.png"))

        # The fleet: the agent that ran the job, drained and resumed from its card.
        page.goto(url + "/fleet")
        card = page.locator(f"#follower-{agent}")
        assert "onnxruntime" in card.inner_text() and "no GPU" in card.inner_text()
        _fits(page)
        page.screenshot(path=str(shots / "console-fleet.png"))
        card.locator('[data-action="drain"]').click()
        page.wait_for_selector(f'#follower-{agent} [data-action="resume"]')
        assert card.locator(".follower-state").inner_text() == "draining"
        listed = {f["info"]["follower_id"]: f for f in leader.client.get("/api/v1/followers", headers=ADMIN).json()}
        assert listed[agent]["state"] == "draining"
        card.locator('[data-action="resume"]').click()
        page.wait_for_selector(f'#follower-{agent} [data-action="drain"]')
        assert card.locator(".follower-state").inner_text() != "draining"

        # A job no follower can run says why on its page (by the 8 characters the console shows), and an unknown job's
        # page is the console's own, not the API's JSON.
        spec = SPEC_YAML.format(model="ident:1").replace("[onnxruntime]", "[tfserving]")
        stuck = leader.submit(text=spec)["id"]
        reason = leader.wait_for(stuck, lambda job: bool(job.get("waiting_reason")))["waiting_reason"]
        page.goto(f"{url}/jobs/{stuck[:8]}")
        assert page.locator("#job-waiting").is_visible() and page.inner_text("#waiting-reason") == reason
        assert "needs backends tfserving" in reason, reason
        page.wait_for_function("document.getElementById('live-state').textContent.includes('points')")  # a live tick
        assert page.inner_text("main").count(reason) == 1  # said once, not again in the live box
        page.screenshot(path=str(shots / "console-job-waiting.png"))
        unknown = page.goto(f"{url}/jobs/0123456789abcdef0123456789abcdef")
        assert unknown is not None and unknown.status == 404 and "does not exist" in page.inner_text("#not-found")
        page.screenshot(path=str(shots / "console-missing-job.png"))


def test_a_viewer_sees_no_controls_and_is_refused_if_it_posts(console: dict[str, Any]) -> None:
    leader: Leader = console["leader"]
    made = leader.client.post("/api/v1/tokens", headers=ADMIN, json={"user": "vic", "role": "viewer"})
    assert made.status_code == 201, made.text
    url, waiting = console["url"], console["waiting"]
    with logged_in(console["browser"], url, made.json()["token"]) as page:
        page.goto(url + "/jobs")
        page.wait_for_selector(f'tr[data-job="{waiting}"]')
        assert page.locator('[data-action="cancel"], [data-action="rerun"]').count() == 0
        assert page.locator('[data-action="yaml"]').count() >= 1  # reading is allowed
        page.goto(url + "/fleet")
        page.wait_for_selector(".follower")
        assert page.locator('[data-action="drain"], [data-action="resume"]').count() == 0
        # Posting anyway, from the page itself with its CSRF token: the API refuses the role; without it, the token.
        status = page.evaluate(
            """async ([job]) => {
                 const csrf = document.querySelector('meta[name="csrf-token"]').content;
                 const signed = await fetch(`/api/v1/jobs/${job}/cancel`, {method: "POST", headers: {"X-CSRF-Token": csrf}});
                 const bare = await fetch(`/api/v1/jobs/${job}/cancel`, {method: "POST"});
                 return [signed.status, (await bare.json()).field];
               }""",
            [waiting],
        )
        assert status == [403, "X-CSRF-Token"], status
    assert leader.job(waiting)["state"] == "assigned"


def test_submitting_from_the_browser_checks_as_you_type(console: dict[str, Any], artifacts_dir: Path) -> None:
    leader: Leader = console["leader"]
    url = console["url"]
    jobs_before = len(leader.client.get("/api/v1/jobs", headers=ADMIN).json())
    with logged_in(console["browser"], url, ADMIN_TOKEN) as page:
        page.goto(url + "/submit")
        page.wait_for_selector("#spec-status.ok")  # the tensor-sweep template, on the team's model, checks out
        status = page.inner_text("#spec-status")
        assert status.startswith("valid: 6 point(s)") and "it would run on follower agent-" in status, status
        _fits(page)
        page.screenshot(path=str(artifacts_dir / "web" / "console-submit.png"))

        # An invalid spec: the API's own message, its field flagged in the field list; Submit stores nothing.
        bad = page.input_value("#spec").replace("rate: [50, 100, 200]", "rate: [50, -1]")
        page.fill("#spec", bad)
        page.wait_for_selector("#spec-status.err")
        refused = leader.client.post("/api/v1/jobs", headers={**ADMIN, "Content-Type": "application/yaml"}, content=bad).json()
        assert page.get_attribute("#spec-status", "data-field") == refused["field"]
        assert refused["message"] in page.inner_text("#spec-status")
        flagged = page.locator("dt.flagged").get_attribute("data-field")
        assert flagged is not None and refused["field"].startswith(flagged), (flagged, refused["field"])
        page.screenshot(path=str(artifacts_dir / "web" / "console-submit-invalid.png"))
        page.click("#submit-job")
        page.wait_for_selector("#spec-status.err")
        assert len(leader.client.get("/api/v1/jobs", headers=ADMIN).json()) == jobs_before

        # A template, then Submit: the job's page opens with its live progress.
        page.select_option("#template", "SLO search")
        page.wait_for_selector("#spec-status.ok")
        page.click("#submit-job")
        page.wait_for_url("**/jobs/*")
        job_id = page.url.rsplit("/", 1)[1]
        page.wait_for_selector("#live-state")
        submitted = leader.job(job_id)
        assert submitted["name"] == "capacity" and submitted["spec"]["load"]["search"]["high"] == 1000
    made = leader.client.post("/api/v1/tokens", headers=ADMIN, json={"user": "val", "role": "viewer"})
    with logged_in(console["browser"], url, made.json()["token"]) as page:
        page.goto(url + "/submit")
        assert page.locator("#no-submit").is_visible() and page.locator("#spec").count() == 0


def test_the_repository_uploads_checks_and_deletes(console: dict[str, Any], artifacts_dir: Path, tmp_path: Path) -> None:
    leader: Leader = console["leader"]
    url = console["url"]
    good, bad, trace = tmp_path / "fc.onnx", tmp_path / "broken.onnx", tmp_path / "trace.txt"
    good.write_bytes(identity_model())
    bad.write_bytes(b"not an onnx model")
    trace.write_bytes(b"0\n0.5\n1.0\n")
    with logged_in(console["browser"], url, ADMIN_TOKEN) as page:
        page.goto(url + "/models")
        row = page.locator('tr.model[data-model="ident:1"]')
        assert row.locator("td").nth(9).inner_text() == "2"  # the finished job and the waiting one
        # A file that fails the API's check: its message in the form, the file field marked, nothing stored.
        form = page.locator("#model-upload")
        form.locator("[name=name]").fill("broken")
        form.locator("[name=file]").set_input_files(str(bad))
        form.locator("button[type=submit]").click()
        page.wait_for_selector("#model-upload .form-error:not([hidden])")
        assert form.locator(".form-error").get_attribute("data-field") == "file"
        assert form.locator("[name=file]").get_attribute("aria-invalid") == "true"
        assert leader.client.get("/api/v1/models/broken/1", headers=ADMIN).status_code == 404
        # A good one: stored with its checksum and tags, listed after the upload.
        form.locator("[name=name]").fill("fc")
        form.locator("[name=tags]").fill("vision, small")
        form.locator("[name=file]").set_input_files(str(good))
        form.locator("button[type=submit]").click()
        page.wait_for_selector('tr.model[data-model="fc:1"]')
        stored = leader.client.get("/api/v1/models/fc/1", headers=ADMIN).json()
        assert stored["tags"] == ["small", "vision"]  # the API keeps them sorted
        assert stored["sha256"][:12] in page.locator('tr[data-model="fc:1"]').inner_text()
        # Trusted by the admin, then deleted.
        page.click('tr[data-model="fc:1"] [data-action="trust"]')
        page.wait_for_function("document.querySelector('tr[data-model=\"fc:1\"] td.model-trusted').textContent === 'yes'")
        assert leader.client.get("/api/v1/models/fc/1", headers=ADMIN).json()["trusted"] is True
        page.once("dialog", lambda dialog: dialog.accept())
        page.click('tr[data-model="fc:1"] [data-action="delete-model"]')
        page.wait_for_selector('tr.model[data-model="fc:1"]', state="detached")
        assert leader.client.get("/api/v1/models/fc/1", headers=ADMIN).status_code == 404
        # A model a waiting job uses: the API's refusal, shown.
        page.once("dialog", lambda dialog: dialog.accept())
        page.click('tr[data-model="ident:1"] [data-action="delete-model"]')
        page.wait_for_selector("#console-error:not([hidden])")
        assert "job" in page.inner_text("#console-error")
        # A data set (a trace of send times), listed and deleted.
        data = page.locator("#data-upload")
        data.locator("[name=name]").fill("arrivals")
        data.locator("[name=format]").select_option("trace")
        data.locator("[name=file]").set_input_files(str(trace))
        data.locator("button[type=submit]").click()
        page.wait_for_selector("tr.dataset")
        assert "arrivals" in page.locator("tr.dataset").inner_text() and "trace" in page.locator("tr.dataset").inner_text()
        _fits(page)
        page.screenshot(path=str(artifacts_dir / "web" / "console-models.png"))
        page.once("dialog", lambda dialog: dialog.accept())
        page.click('tr.dataset [data-action="delete-data"]')
        page.wait_for_selector("#no-data")
        assert leader.client.get("/api/v1/data", headers=ADMIN).json() == []


def test_importing_another_tools_run_opens_its_job_labelled_with_the_tools_definitions(
    console: dict[str, Any], artifacts_dir: Path
) -> None:
    """The jobs page's import form: a file of no known tool is refused in the form (field `file`); vLLM's two real
    result files become a job whose page says who measured it, how that tool defines latency and TTFT, "not judged" on
    every point, benchfleet's own figures from vLLM's records beside vLLM's, and links to the files kept."""
    url = console["url"]
    vllm = sorted((FIXTURES / "vllm").glob("*.json"))
    with logged_in(console["browser"], url, ADMIN_TOKEN) as page:
        page.goto(url + "/jobs")
        form = page.locator("#import-upload")
        form.locator("[name=file]").set_input_files(str(FIXTURES / "aiperf" / "COMMAND.txt"))
        form.locator("button[type=submit]").click()
        page.wait_for_selector("#import-upload .form-error:not([hidden])")
        assert form.locator(".form-error").get_attribute("data-field") == "file"
        assert "not recognised" in form.locator(".form-error").inner_text()
        form.locator("[name=file]").set_input_files([str(p) for p in vllm])
        form.locator("[name=name]").fill("vllm-pr-run")
        form.locator("button[type=submit]").click()
        page.wait_for_selector("#imported")
        assert "Imported from vllm bench serve" in page.inner_text("#imported")
        definitions = page.inner_text("#definitions")
        assert "from its send stamp to the last byte (not from the scheduled time)" in definitions and "TTFT" in definitions
        verdicts = page.locator("#points td.verdict-cell").all_inner_texts()
        assert len(verdicts) == 2 and all(v.startswith("not judged") for v in verdicts)
        assert page.locator("#points tbody tr").nth(0).locator("td").nth(3).inner_text() == "request rate 4"
        rows = page.locator("#recomputed tr.recomputed")
        assert rows.count() == 16 and "TTFT p99" in page.inner_text("#recomputed")
        assert page.locator("a.imported-file").all_inner_texts() == [p.name for p in vllm]
        assert not page.locator('[data-action="rerun"]').count()  # nothing re-runs another tool's run
        _fits(page)
        page.screenshot(path=str(artifacts_dir / "web" / "console-imported-job.png"), full_page=True)
        page.goto(url + "/jobs")
        assert "imported from vllm bench serve: 2 points, not judged" in page.inner_text("#jobs")
        # Every other tool's files through the same form: each opens its job, labelled with its tool, not judged.
        for tool, name in TOOL_NAMES.items():
            if tool == "vllm":
                continue
            page.goto(url + "/jobs")
            files = [str(p) for p in sorted((FIXTURES / tool).iterdir()) if not p.name.startswith("COMMAND")]
            page.locator("#import-upload [name=file]").set_input_files(files)
            page.locator("#import-upload button[type=submit]").click()
            page.wait_for_selector("#imported")
            assert f"Imported from {name}" in page.inner_text("#imported"), tool
            assert all(v.startswith("not judged") for v in page.locator("#points td.verdict-cell").all_inner_texts()), tool
            if tool == "aiperf":
                aiperf_job = page.url.rsplit("/", 1)[1]
        # vLLM's run against AIPerf's on the compare page: one pair on pattern and load, not judged until the box is
        # ticked, each side's definitions under the verdict (never called invalid).
        vllm_job = console["leader"].client.get("/api/v1/jobs", headers=ADMIN, params={"limit": 50}).json()
        vllm_id = next(j["id"] for j in vllm_job if j["name"] == "vllm-pr-run")
        page.goto(f"{url}/compare?a={vllm_id}&b={aiperf_job}")
        row = page.locator("#comparison tr", has_text="poisson|4 req/s").first
        assert row.get_attribute("class") == "not_judged" and "measured by AIPerf" in row.inner_text()
        assert "invalid" not in row.inner_text()
        page.check("#include-imported")
        page.click("#compare-form button")
        page.wait_for_url("**include_imported=true**")
        judged = page.locator("#comparison tr", has_text="poisson|4 req/s").first.get_attribute("class")
        assert judged in ("unchanged", "regression", "improvement")
