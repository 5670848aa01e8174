"""What a new user does after the demo, driven as subprocesses: push a model, submit their own YAML with `--watch`,
see one progress bar per point and the result table; meanwhile /metrics on the leader and the follower change."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from benchfleet.generate.modelgen import mlp_onnx
from common.procs import free_port
from tests.integration.leader.test_imports import FIXTURES

# Each tool's fixture: the points it holds and the version its files give.
IMPORTED = {
    "vllm": (2, "bench serve"),
    "aiperf": (1, "AIPerf 0.13.0"),
    "guidellm": (2, "GuideLLM 0.8.1"),
    "inference-perf": (2, "inference-perf"),
    "genai-bench": (2, "genai-bench 0.0.5"),
    "perf_analyzer": (2, "perf_analyzer"),
    "loadgen": (1, "MLPerf LoadGen 6.0.17"),
}

pytestmark = pytest.mark.e2e


def _metric(text: str, name: str, **labels: str) -> float:
    """The value of one sample in Prometheus text format (0 when absent)."""
    want = ",".join(f'{k}="{v}"' for k, v in labels.items())
    pattern = re.compile(rf"^{re.escape(name)}(?:\{{([^}}]*)\}})? (\S+)$", re.M)
    for match in pattern.finditer(text):
        if (match.group(1) or "") == want:
            return float(match.group(2))
    return 0.0


def _env(fleet, token: str | None = None) -> dict[str, str]:  # type: ignore[no-untyped-def]
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "BENCHFLEET_URL": fleet.url,
            "BENCHFLEET_TOKEN": token or fleet.admin_token, "PYTHONPATH": os.environ.get("PYTHONPATH", "")}  # fmt: skip


def _cli(fleet, *args: str, timeout: float = 60, token: str | None = None) -> subprocess.CompletedProcess[str]:  # type: ignore[no-untyped-def]
    env = {**_env(fleet, token), "COLUMNS": "80", "TERM": "dumb"}  # a pipe: the width a terminal would have is moot
    return subprocess.run(
        [sys.executable, "-m", "benchfleet", *args], capture_output=True, text=True, env=env, timeout=timeout, check=False
    )


def test_submit_watch_from_the_cli_while_metrics_change(fleet, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    metrics_port = free_port()
    fleet.env["BENCHFLEET_FOLLOWER_METRICS_PORT"] = str(metrics_port)
    try:
        fleet.start_follower("f-cli")
    finally:
        fleet.env.pop("BENCHFLEET_FOLLOWER_METRICS_PORT")
    leader_metrics, follower_metrics = f"{fleet.url}/metrics", f"http://127.0.0.1:{metrics_port}/metrics"
    before_leader, before_follower = httpx.get(leader_metrics).text, httpx.get(follower_metrics).text
    assert "benchfleet_leader_jobs" in before_leader and "benchfleet_follower_busy 0.0" in before_follower

    model_file = tmp_path / "mlp.onnx"
    model_file.write_bytes(mlp_onnx(inputs=16, hidden=32))
    pushed = _cli(fleet, "models", "push", str(model_file), "--name", "mlp-cli", "--version", "1")
    assert pushed.returncode == 0, pushed.stderr
    assert "mlp-cli:1" in pushed.stdout

    job_file = tmp_path / "my.yaml"
    job_file.write_text(
        "name: my-first-job\nmodel: mlp-cli:1\nbackends: [onnxruntime]\nbatch_sizes: [1, 4]\n"
        "load: {allow_short: true, pattern: poisson, rate: 100, duration: 2s, warmup: 0.5s}\nslo: {p99_ms: 500}\n"
    )
    # Scrape both endpoints while the CLI watches the job.
    busy_seen: list[float] = []
    running_points: set[float] = set()
    stop = threading.Event()

    def scrape() -> None:
        while not stop.is_set():
            try:
                text = httpx.get(follower_metrics, timeout=2).text
                busy_seen.append(_metric(text, "benchfleet_follower_busy"))
                running_points.add(_metric(text, "benchfleet_follower_running_point"))
            except httpx.HTTPError:
                pass
            stop.wait(0.2)

    scraper = threading.Thread(target=scrape, daemon=True)
    scraper.start()
    try:
        watched = _cli(fleet, "submit", str(job_file), "--watch", timeout=180)
    finally:
        stop.set()
        scraper.join(5)
    assert watched.returncode == 0, watched.stderr[-2000:]
    job_id = watched.stdout.splitlines()[0].strip()
    # One progress bar per point, each finished; then the results table with both points.
    for index, label in ((0, "onnxruntime b1 @ 100 req/s"), (1, "onnxruntime b4 @ 100 req/s")):
        assert re.search(rf"point {index}: {re.escape(label)}.*100%", watched.stderr), watched.stderr[-2000:]
    assert "my-first-job" in watched.stdout and "succeeded" in watched.stdout
    assert re.search(r"^\s*1\s+onnxruntime\s+4\s+100 req/s\s", watched.stdout, re.M), watched.stdout

    as_json = _cli(fleet, "results", job_id[:8], "--format", "json")  # the 8 characters the console shows
    assert as_json.returncode == 0 and len(json.loads(as_json.stdout)["points"]) == 2
    assert _cli(fleet, "jobs").stdout.count(job_id) == 1
    assert "f-cli" in _cli(fleet, "followers").stdout
    # The analysis commands against the leader's analysis endpoints.
    board = _cli(fleet, "leaderboard", "--sort", "p99_ms", "--filter", "backend=onnxruntime", "--json")
    assert board.returncode == 0, board.stderr
    assert job_id in board.stdout
    assert _cli(fleet, "leaderboard", "--filter", "backend=onnxruntime").returncode == 0
    recommended = _cli(fleet, "recommend", "--p99-ms", "10000", "--json")
    assert recommended.returncode == 0, recommended.stderr
    # Held at the upper end of each p99's CI: these points' CIs end far below 10 s, so the same picks.
    sure = _cli(fleet, "recommend", "--p99-ms", "10000", "--confident", "--json")
    assert sure.returncode == 0, sure.stderr
    assert json.loads(sure.stdout)["query"]["confident"] and not json.loads(recommended.stdout)["query"]["confident"]
    # A language model's question with no language-model point in the history: what to run, not an empty answer.
    llm = _cli(fleet, "recommend", "--ttft-ms", "500", "--tpot-ms", "50", "--json")
    assert llm.returncode == 0 and json.loads(llm.stdout)["missing"].startswith("not enough evidence: no valid language")
    assert _cli(fleet, "recommend", "--min-rps", "10").returncode == 2  # no SLO asked: a usage error naming it
    assert json.loads(sure.stdout)["recommendations"] == json.loads(recommended.stdout)["recommendations"]
    compared = _cli(fleet, "compare", job_id, job_id, "--json")
    # A job against itself: no regression; a point the host's load made invalid is not judged, and says so (exit 6).
    invalid = sum(not p["valid"] for p in json.loads(as_json.stdout)["points"])
    assert json.loads(compared.stdout)["regressions"] == 0 and json.loads(compared.stdout)["invalid"] == invalid
    assert compared.returncode == (6 if invalid else 0), compared.stderr
    # `rerun`: the job again exactly as it ran (its spec, its model's version, its seed); every point of the two runs
    # comparable: the same configuration hash, measured on the same kind of host.
    again = _cli(fleet, "rerun", job_id, "--watch", timeout=180)
    assert again.returncode == 0, again.stderr[-2000:]
    rerun_id = again.stdout.splitlines()[0].strip()
    first, second = (json.loads(_cli(fleet, "job", j).stdout) for j in (job_id, rerun_id))
    assert rerun_id != job_id and second["spec"] == first["spec"] and second["model_ref"] == "mlp-cli:1"
    verdicts = json.loads(_cli(fleet, "compare", job_id, rerun_id, "--json").stdout)
    assert [p["comparable"] for p in verdicts["points"]] == ["comparable", "comparable"], verdicts["points"]
    ran = json.loads(_cli(fleet, "results", rerun_id, "--format", "json").stdout)["points"][0]["environment"]
    assert ran["kernel"] and ran["os"] and len(ran["config_hash"]) == 64 and ran["packages"]["numpy"], ran
    csv = _cli(fleet, "results", job_id, "--format", "csv")
    assert csv.returncode == 0 and len(csv.stdout.strip().splitlines()) == 3, csv.stdout[:500]
    parquet = tmp_path / "r.parquet"
    assert _cli(fleet, "results", job_id, "--format", "parquet", "-o", str(parquet)).returncode == 0
    assert parquet.read_bytes()[:4] == b"PAR1"
    bad = _cli(fleet, "leaderboard", "--filter", "nosuchcolumn=1")
    assert bad.returncode == 3 and len(bad.stderr.strip().splitlines()) == 1, bad.stderr

    missing = _cli(fleet, "job", "no-such-job")
    assert missing.returncode == 3 and len(missing.stderr.strip().splitlines()) == 1

    # The follower was seen busy on a point, and is idle again; its counters moved.
    assert 1.0 in busy_seen and running_points & {0.0, 1.0}, (busy_seen[-5:], running_points)
    after_follower = httpx.get(follower_metrics).text
    assert (
        _metric(after_follower, "benchfleet_follower_points_total", valid="true")
        + _metric(after_follower, "benchfleet_follower_points_total", valid="false")
        >= 2
    )
    assert _metric(after_follower, "benchfleet_follower_jobs_total", outcome="succeeded") >= 1
    assert _metric(after_follower, "benchfleet_follower_generator_target_rate") == 100.0
    assert _metric(after_follower, "benchfleet_follower_busy") == 0.0
    # The leader's gauges refresh every 2 s: wait for the succeeded job to show.
    deadline = time.monotonic() + 15
    while True:
        after_leader = httpx.get(leader_metrics).text
        if (
            _metric(after_leader, "benchfleet_leader_jobs", state="succeeded")
            > _metric(before_leader, "benchfleet_leader_jobs", state="succeeded")
            or time.monotonic() > deadline
        ):
            break
        time.sleep(0.5)
    assert _metric(after_leader, "benchfleet_leader_jobs", state="succeeded") >= 1
    assert _metric(after_leader, "benchfleet_leader_placement_seconds_count") >= 1
    assert _metric(after_leader, "benchfleet_leader_follower_queue_jobs", follower_id="f-cli") == 0.0
    submitted = _metric(
        after_leader, "benchfleet_leader_api_request_seconds_count", method="POST", route="/api/v1/jobs", status="201"
    )
    assert submitted >= 1, [line for line in after_leader.splitlines() if "api_request_seconds_count" in line]
    # Structured logs: the follower's JSON lines carry the job and follower ids.
    log_lines = [json.loads(line) for line in (fleet.workdir / "f-cli-0.log").read_text().splitlines() if line.startswith("{")]
    assert any(rec.get("job_id") == job_id and rec.get("follower_id") == "f-cli" for rec in log_lines)


def test_data_push_ls_rm(fleet, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """`benchfleet data push/ls/rm`: a data set goes up, is listed, and is gone (sharing this module's fleet)."""
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps({"input": [[0.5] * 4]}) + "\n" for _ in range(3)))
    pushed = _cli(fleet, "data", "push", str(rows), "--name", "cli-rows", "--format", "jsonl")
    assert pushed.returncode == 0, pushed.stderr
    data_id = pushed.stdout.split()[0]
    assert "name=cli-rows format=jsonl samples=3" in pushed.stdout

    listed = _cli(fleet, "data", "ls")
    assert listed.returncode == 0, listed.stderr
    line = next(row for row in listed.stdout.splitlines() if data_id in row)
    assert "cli-rows" in line and "jsonl" in line and "input" in line

    removed = _cli(fleet, "data", "rm", data_id)
    assert removed.returncode == 0, removed.stderr
    assert json.loads(removed.stdout) == {"deleted": data_id}
    assert data_id not in _cli(fleet, "data", "ls").stdout

    # The API's refusals come back as one line naming the field, exit code 3; a second rm finds nothing.
    bad = _cli(fleet, "data", "push", str(rows), "--name", "cli-rows", "--format", "csv")
    assert bad.returncode == 3 and "format" in bad.stderr
    again = _cli(fleet, "data", "rm", data_id)
    assert again.returncode == 3 and again.stderr.startswith("error:")


def test_models_trust_marks_and_unmarks_a_model(fleet, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """`benchfleet models trust NAME VERSION [--untrust]` (admins): the mark shows in the model's metadata."""
    from benchfleet.generate.modelgen import mlp_onnx

    path = tmp_path / "trust.onnx"
    path.write_bytes(mlp_onnx())
    assert _cli(fleet, "models", "push", str(path), "--name", "cli-trust", "--version", "1").returncode == 0
    marked = _cli(fleet, "models", "trust", "cli-trust", "1")
    assert marked.returncode == 0, marked.stderr
    assert json.loads(marked.stdout) == {"model": "cli-trust:1", "trusted": True}
    unmarked = _cli(fleet, "models", "trust", "cli-trust", "1", "--untrust")
    assert json.loads(unmarked.stdout) == {"model": "cli-trust:1", "trusted": False}
    missing = _cli(fleet, "models", "trust", "cli-trust", "9")
    assert missing.returncode == 3 and "version" in missing.stderr


def _follower_up(fleet, follower_id: str) -> None:  # type: ignore[no-untyped-def]
    """This module's follower (the first test starts it; a test run alone starts it here)."""
    listed = httpx.get(f"{fleet.url}/api/v1/followers", headers={"Authorization": f"Bearer {fleet.admin_token}"}).json()
    if not any(f["info"]["follower_id"] == follower_id for f in listed):
        fleet.start_follower(follower_id)


def _in_tmux(fleet, args: list[str], width: int, until: str) -> str:  # type: ignore[no-untyped-def]
    """What `benchfleet ARGS` shows in a real terminal `width` columns wide (a tmux pane), once `until` is on it."""
    server = f"bf-{os.getpid()}-{time.monotonic_ns()}"
    env = _env(fleet)
    command = " ".join([f"{k}={v!r}" for k, v in env.items()] + [sys.executable, "-m", "benchfleet", *args])
    subprocess.run(["tmux", "-L", server, "-f", "/dev/null", "new-session", "-d", "-x", str(width), "-y", "80",
                    f"{command}; sleep 60"], check=True, timeout=10)  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while True:
            shown = subprocess.run(["tmux", "-L", server, "capture-pane", "-p", "-J", "-S", "-"], capture_output=True,
                                   text=True, timeout=10).stdout  # fmt: skip
            if until in shown or time.monotonic() > deadline:
                return shown
            time.sleep(0.2)
    finally:
        subprocess.run(["tmux", "-L", server, "kill-server"], check=False, timeout=10)


def test_watch_says_why_a_job_waits(fleet, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """A job no follower can run (a backend none offers): `submit --watch` prints the leader's reason, on a line of its
    own, while it waits (it once spun on "queued (0/1)" in silence); the job's JSON says the same."""
    _follower_up(fleet, "f-cli")
    model_file = tmp_path / "wait.onnx"
    model_file.write_bytes(mlp_onnx(inputs=4, hidden=8))
    assert _cli(fleet, "models", "push", str(model_file), "--name", "mlp-wait", "--version", "1").returncode == 0
    spec = tmp_path / "wait.yaml"
    spec.write_text("name: waits\nmodel: mlp-wait:1\nbackends: [tfserving]\nload: {rate: 50, duration: 10s}\n")
    env = {**_env(fleet), "COLUMNS": "80", "TERM": "dumb"}
    argv = [sys.executable, "-m", "benchfleet", "submit", str(spec), "--watch"]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(proc.stderr.readline, "")), daemon=True)  # type: ignore[union-attr]
    reader.start()
    try:
        deadline = time.monotonic() + 60
        while not any("no available follower has it" in line for line in lines) and time.monotonic() < deadline:
            assert proc.poll() is None, (proc.returncode, lines)
            time.sleep(0.2)
        said = next((line for line in lines if "no available follower has it" in line), None)
        assert said is not None and said.startswith("waits queued: ") and "needs backends tfserving" in said, lines
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    job_id = next(j["id"] for j in json.loads(_cli(fleet, "jobs", "--json").stdout) if j["name"] == "waits")
    shown = _cli(fleet, "job", job_id)
    view = json.loads(shown.stdout)
    assert view["state"] == "queued" and "needs backends tfserving" in view["waiting_reason"], view
    assert shown.stderr.strip() == f"waits queued: {view['waiting_reason']}", shown.stderr  # the job view says it too
    assert _cli(fleet, "cancel", job_id).returncode == 0


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed (scripts/setup.sh installs it)")
def test_tables_read_whole_at_80_columns_and_compare_gates_ci(fleet, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """A job's table piped to a file shows every column uncut; in an 80-column terminal, the columns that fit, uncut;
    `compare` judges no point whose side is invalid and says so (exit 6, not 5: a CI gate never gates on an invalid
    point; its exit codes from valid points are tests/unit/benchfleet/test_cli.py's); tokens, baselines and reports
    from the CLI."""
    _follower_up(fleet, "f-cli")
    jobs = {}
    for name, hidden in (("light", 16), ("heavy", 4096)):
        path = tmp_path / f"{name}.onnx"
        # The heavy one is overloaded, so its point is invalid whatever the host does: at batch 16 on one thread it
        # computes ~17 ms per request against ~0.01 ms, and 80 req/s offer it 1.4x what it serves: its latency from the
        # intended time grows through the run to seconds, and the judge names the saturated server.
        path.write_bytes(mlp_onnx(inputs=512, hidden=hidden, layers=4 if name == "heavy" else 1))
        assert _cli(fleet, "models", "push", str(path), "--name", f"mlp-{name}", "--version", "1").returncode == 0
        spec = tmp_path / f"{name}.yaml"
        head = f"name: gate-{name}\nmodel: mlp-{name}:1\nbackends: [onnxruntime]\nbatch_sizes: [16]\nserver: {{threads: 1}}\n"
        spec.write_text(head + "load: {pattern: poisson, rate: 80, duration: 9s, warmup: 0.5s}\nslo: {p99_ms: 500}\n")
        watched = _cli(fleet, "submit", str(spec), "--watch", timeout=180)
        assert watched.returncode == 0, watched.stderr[-2000:]
        jobs[name] = watched.stdout.splitlines()[0].strip()

    headers = ("#", "backend", "batch", "load", "req/s", "req", "err", "p50 ms", "p90", "p99", "p99.9", "max", "svc p99",
               "lag p99", "cold s", "SLO", "valid")  # fmt: skip
    piped = _cli(fleet, "results", jobs["light"])
    assert piped.returncode == 0 and "…" not in piped.stdout, piped.stdout
    header = next(line for line in piped.stdout.splitlines() if "backend" in line)
    assert header.split() == [h for name in headers for h in name.split()], header
    assert "not shown" not in piped.stdout

    screen = _in_tmux(fleet, ["results", jobs["light"]], 80, until="not shown at this width")
    lines = [line for line in screen.splitlines() if line.strip()]
    assert "not shown at this width" in screen and "…" not in screen, screen
    assert max(len(line) for line in lines) <= 80, screen
    shown = next(line for line in lines if "backend" in line).split()
    assert {"#", "backend", "load", "p99", "SLO", "valid"} <= set(shown) and "max" not in shown, screen
    assert re.search(r"^\s*0\s+onnxruntime\s+16\s+80 req/s\s", screen, re.M), screen

    # The heavy job's point is invalid by construction (offered 1.4x what it serves): compare shows its figures and its
    # reason and judges nothing, either way round (exit 6, "not judged"), where it once gated on it (exit 5, and the
    # reverse an "improvement").
    heavy = json.loads(_cli(fleet, "results", jobs["heavy"], "--format", "json").stdout)["points"][0]
    assert not heavy["valid"] and heavy["invalid_reasons"], heavy
    worse = _cli(fleet, "compare", jobs["light"], jobs["heavy"], "--wide")
    shown = " ".join(worse.stdout.split())
    assert worse.returncode == 6 and "not judged" in shown, (worse.returncode, worse.stdout, worse.stderr)
    assert "B's point is invalid: " + " ".join(heavy["invalid_reasons"][0].split()) in shown, shown
    answer = json.loads(_cli(fleet, "compare", jobs["light"], jobs["heavy"], "--json").stdout)
    assert answer["regressions"] == 0 and answer["invalid"] == 1 and answer["points"][0]["verdict"] == "invalid"
    better = _cli(fleet, "compare", jobs["heavy"], jobs["light"])
    assert better.returncode == 6 and "improvement" not in better.stdout, better.stdout
    assert _cli(fleet, "baseline", "gate", jobs["light"]).returncode == 0
    assert _cli(fleet, "compare", "baseline:gate", jobs["heavy"]).returncode == 6
    report = tmp_path / "report.html"
    assert _cli(fleet, "report", jobs["light"], "-o", str(report)).returncode == 0
    assert 'id="chart-data"' in report.read_text() and jobs["light"] in report.read_text()

    made = _cli(fleet, "tokens", "create", "tia", "--role", "viewer", "--team", "other")
    assert made.returncode == 0, made.stderr
    secret = made.stdout.strip()
    assert "tia" in made.stderr and "team other" in made.stderr and len(secret.splitlines()) == 1
    listed = json.loads(_cli(fleet, "tokens", "ls", "--json").stdout)
    mine = next(t for t in listed if t["user"] == "tia")
    assert mine["team"] == "other" and "token" not in mine
    assert _cli(fleet, "jobs", "--json", token=secret).stdout.strip() == "[]"  # another team's jobs are not its own
    assert _cli(fleet, "tokens", "revoke", mine["id"]).returncode == 0
    assert _cli(fleet, "jobs", token=secret).returncode == 3
    drained = _cli(fleet, "drain", "f-cli")
    assert drained.returncode == 0 and "draining" in drained.stdout, drained.stdout
    resumed = _cli(fleet, "resume", "f-cli")
    assert resumed.returncode == 0 and "draining" not in resumed.stdout, resumed.stdout
    approved = _cli(fleet, "approve", "f-cli")  # trusted already (one host's fleet): approving changes nothing
    assert approved.returncode == 0 and approved.stdout.startswith("follower f-cli "), approved.stdout
    assert "pending" not in approved.stdout, approved.stdout
    assert _cli(fleet, "approve", "no-such-follower").returncode != 0


def test_import_of_another_tools_files_shows_its_figures_unjudged(fleet) -> None:  # type: ignore[no-untyped-def]
    """`benchfleet import FILE…` (sharing this module's fleet) for each tool's real files: a job of one point per load
    level, shown with the tool's name and version, its definition of latency, "not judged" on every point, and, where
    the files keep per-request records, benchfleet's own figures from them; a file of no known tool exits 3 naming the
    field."""
    for tool, (points, version) in IMPORTED.items():
        files = [str(p) for p in sorted((FIXTURES / tool).iterdir()) if not p.name.startswith("COMMAND")]
        done = _cli(fleet, "import", *files)
        assert done.returncode == 0, (tool, done.stderr)
        assert re.search(rf"imported .*{re.escape(version)}: job [0-9a-f]{{32}}, {points} points", done.stdout), done.stdout
        assert done.stdout.count("not judged") >= points and "and imported; its latency" in done.stdout, done.stdout
    guidellm = _cli(fleet, "import", str(FIXTURES / "guidellm" / "benchmarks.json"))
    assert "benchfleet's own from its 16 records" in guidellm.stdout
    bad = _cli(fleet, "import", str(FIXTURES / "aiperf" / "COMMAND.txt"))
    assert bad.returncode == 3 and "file" in bad.stderr and "not recognised" in bad.stderr
