"""A language model's quality beside its speed, end to end against a real llama.cpp: the canonical LLM served as
float32, float16 and 4-bit (q4_0) in one job, each configuration's greedy completions of an evaluation set scored
and set against the float32 reference's, token by token; the evaluation's accuracy on the leaderboard.

The evaluation set's answers are the float32 model's own greedy completions (its first words), taken here from a
llama-server started by hand on the same model before the job: reference outputs, as MLPerf's accuracy mode keeps
them. So the float32 configuration must score every row, and a configuration that answers otherwise scores less."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import httpx
import pytest
from rich.console import Console

from benchfleet.render import print_results
from common.procs import free_port
from common.wire.jobs import JobResults
from follower.backends.llamacpp import LlamaCppBackend
from follower.convert.to_gguf import convert
from tests.e2e.test_walking_skeleton import _wait_done, _wait_until

pytestmark = pytest.mark.e2e
SYLLABLES = ["ka", "lo", "mi", "ne", "ru", "ta", "vo", "si", "be", "do", "fa", "gu", "hi", "ja"]
PROMPTS = [" ".join(SYLLABLES[i : i + 3]) for i in range(12)]
ANSWER_TOKENS, ANSWER_WORDS = 16, 4


def _reference_answers(model_dir: Path, workdir: Path) -> list[str]:
    """Each prompt's greedy completion by the float32 model on a llama-server started here: its first words."""
    gguf = convert(model_dir, workdir / "ref-f32.gguf", dtype="float32")
    port = free_port()
    server = subprocess.Popen(
        [str(LlamaCppBackend.interpreter()), "--model", str(gguf), "--host", "127.0.0.1", "--port", str(port), "--threads", "1"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        url = f"http://127.0.0.1:{port}"

        def ready() -> bool:
            try:
                return httpx.get(f"{url}/health", timeout=1).status_code == 200
            except httpx.HTTPError:
                return False

        _wait_until(ready, 60, "the reference llama-server")
        answers = []
        for prompt in PROMPTS:
            body = {"model": "m", "prompt": prompt, "max_tokens": ANSWER_TOKENS, "temperature": 0}
            text = httpx.post(f"{url}/v1/completions", json=body, timeout=60).json()["choices"][0]["text"]
            answers.append(" ".join(text.split()[:ANSWER_WORDS]))
        return answers
    finally:
        server.kill()
        server.wait()


@pytest.mark.timeout(600)
def test_float32_float16_and_4bit_side_by_side_with_evaluation_and_greedy_agreement(fleet, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    ok, why = LlamaCppBackend.available()
    if not ok:
        if os.environ.get("CI"):
            pytest.fail(f"llama.cpp is required under CI: {why}")  # scripts/install_llamacpp.sh builds it
        pytest.skip(why)
    fleet.start_follower("llm-quality")
    bundle = tmp_path / "tiny-llama.zip"
    cli = [
        sys.executable,
        "-m",
        "benchfleet",
        "models",
        "generate",
        "llama",
        "--layers",
        "2",
        "--hidden",
        "128",
        "--heads",
        "4",
        "--vocab",
        "2048",
        "--context",
        "512",
        "--seed",
        "5",
        "--out",
        str(bundle),
        "--push",
        "--name",
        "tiny-llama",
        "--url",
        fleet.url,
        "--token",
        fleet.admin_token,
    ]
    done = subprocess.run(cli, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    zipfile.ZipFile(bundle).extractall(tmp_path / "model")
    answers = _reference_answers(tmp_path / "model", tmp_path)
    rows = "".join(json.dumps({"prompt": p, "answer": a}) + "\n" for p, a in zip(PROMPTS, answers, strict=True))
    with fleet.client() as client:
        evalset = client.upload_data(rows.encode(), name="reference-outputs", format="prompts")
        assert evalset.fields == ["prompt", "answer"]
        job = client.submit_yaml(f"""
name: llm-precision
model: tiny-llama:1
backends: [llamacpp]
sweep: {{llm.dtype: [float32, float16, q4_0]}}
load: {{allow_short: true, pattern: poisson, rate: 4, duration: 3s, warmup: 1s}}
llm: {{dataset: {evalset.id}, order: sequential, output_tokens: 8}}
quality: {{evaluation: {{scorer: contains}}, agreement: true, answer_tokens: {ANSWER_TOKENS}, min_accuracy: 0.5}}
""")
        results: JobResults = _wait_done(client, job.id, timeout_s=420)
        board = client.leaderboard(filters=[f"job_id={job.id}"])
    by_dtype = {p.point.server.llm.dtype: p for p in results.points}
    assert sorted(by_dtype) == ["float16", "float32", "q4_0"]
    n = len(PROMPTS)
    for dtype, point in by_dtype.items():
        quality = point.quality
        assert quality is not None and quality.not_run == [], (dtype, quality)
        assert quality.accuracy is not None and quality.accuracy.scorer == "contains" and quality.accuracy.top1.samples == n
        agreed = quality.completions
        assert agreed is not None and agreed.reference == "llamacpp llm.dtype=float32" and agreed.tokens_from == "server"
        assert agreed.exact.samples == n and agreed.tokens is not None
        print(
            f"\n{dtype}: evaluation {quality.accuracy.top1.points()}, identical {agreed.exact.points()}, tokens "
            f"{agreed.tokens.points()}, first difference {agreed.first_difference}, {quality.seconds:.2f} s, "
            f"{point.environment.backend_version}"
        )
    f32, f16, q4 = (by_dtype[d].quality for d in ("float32", "float16", "q4_0"))
    assert f32 is not None and f16 is not None and q4 is not None
    assert f32.accuracy is not None and f32.accuracy.top1.hits == n  # the reference's own outputs, every one found
    assert f32.completions is not None and f32.completions.exact.hits == n  # the reference agrees with itself
    assert f16.completions is not None and f16.completions.tokens is not None and q4.completions is not None
    assert q4.completions.tokens is not None and q4.accuracy is not None
    # 4-bit weights change the greedy answers: fewer tokens where float16's are, and fewer answers found.
    assert q4.completions.tokens.value < f16.completions.tokens.value
    assert q4.completions.exact.hits < n and q4.accuracy.top1.hits < f32.accuracy.top1.hits
    # The job's floor (50%): 4-bit's answers are below it, so it never ranks as best; float32's and float16's meet it.
    assert (f32.floor_met, f16.floor_met, q4.floor_met) == (True, True, False) and q4.floor == 0.5
    assert sorted(r.quality_floor_met for r in board.rows) == [False, True, True]
    # The evaluation is each row's accuracy on the leaderboard, as a tensor model's is.
    scored = {r.options: (r.accuracy, r.accuracy_samples) for r in board.rows}
    assert sorted(v for v in scored.values()) == sorted(
        (p.quality.accuracy.top1.value, n) for p in results.points if p.quality and p.quality.accuracy
    ), scored
    out = io.StringIO()
    print_results(Console(file=out, width=220), results)
    assert "evaluation (contains)" in out.getvalue() and "identical" in out.getvalue(), out.getvalue()
    assert out.getvalue().count("below the floor 50%") == 1, out.getvalue()
    # The job's page (here its downloadable report, the same template) has a row per configuration.
    report = httpx.get(
        f"{fleet.url}/api/v1/jobs/{job.id}/report.html", headers={"Authorization": f"Bearer {fleet.admin_token}"}, timeout=30
    )
    assert report.status_code == 200
    table = report.text[report.text.index('<table id="quality">') :]
    table = table[: table.index("</table>")]
    assert table.count('class="quality-point"') == 3 and "dtype=q4_0" in table, table
    assert f"evaluation (contains) {q4.accuracy.top1.points()}" in table, table
