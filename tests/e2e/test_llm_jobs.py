"""A language-model job end to end against a real vLLM (its CPU build): the canonical LLM generated and pushed by the
CLI, a YAML job submitted through the leader, run by a follower that starts vLLM, and the answer's figures: time to
first token, inter-token latency, time per output token and goodput, with the server's token counts matching what
was asked, and the server's own view of the run from its metrics. One vLLM start for the whole suite (about a
minute on 2 cores): this module is its only user."""

from __future__ import annotations

import io
import os
import subprocess
import sys

import pytest
from rich.console import Console

from benchfleet.render import results_table
from common.jobs import JobResults
from follower.backends.vllm import VllmBackend, why_no_vllm
from tests.e2e.test_walking_skeleton import _wait_done

pytestmark = pytest.mark.e2e

RATE, DURATION_S, WARMUP_S = 40, 12, 2  # 480 measured requests: enough for a p99 claim
PROMPT_TOKENS, OUTPUT_TOKENS = 48, 16


@pytest.fixture(scope="module")
def llm_model(fleet, tmp_path_factory: pytest.TempPathFactory) -> str:  # type: ignore[no-untyped-def]
    ok, why = VllmBackend.available()
    if not ok:
        # CI installs vLLM (scripts/install_vllm.sh) and must run this module, not skip it.
        if os.environ.get("CI"):
            pytest.fail(f"vLLM is required under CI: {why_no_vllm()}")
        pytest.skip(why)
    fleet.start_follower("llm-host")
    out = tmp_path_factory.mktemp("llm") / "tiny-llama.zip"
    cli = [sys.executable, "-m", "benchfleet", "models", "generate", "llama", "--layers", "2", "--hidden", "128",
           "--heads", "4", "--vocab", "2048", "--context", "512", "--seed", "5", "--out", str(out), "--push",
           "--name", "tiny-llama", "--url", fleet.url, "--token", fleet.admin_token]  # fmt: skip
    done = subprocess.run(cli, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "LlamaForCausalLM" in done.stdout and "tiny-llama:1" in done.stdout, done.stdout
    return "tiny-llama:1"


def test_an_llm_job_reports_ttft_itl_tpot_and_goodput_with_the_servers_token_counts(fleet, llm_model: str) -> None:  # type: ignore[no-untyped-def]
    with fleet.client() as client:
        job = client.submit_yaml(f"""
name: llm-e2e
model: {llm_model}
backends: [vllm]
load: {{pattern: poisson, rate: {RATE}, duration: {DURATION_S}s, warmup: {WARMUP_S}s}}
llm: {{prompt_tokens: {PROMPT_TOKENS}, output_tokens: {OUTPUT_TOKENS}}}
slo: {{ttft_ms: 2000, tpot_ms: 500}}
""")
        results: JobResults = _wait_done(client, job.id, timeout_s=420)
    (point,) = results.points
    llm = point.llm
    assert llm is not None and point.environment.backend_version.startswith("vllm"), point.environment
    codes = [r.code for r in point.reasons]
    assert point.requests == RATE * DURATION_S and point.ok == point.requests, (point.error_sample, codes)
    # The server generated exactly what was asked, as it counted it; every text event was a token it counted.
    assert llm.output_tokens_asked == llm.output_tokens_server == OUTPUT_TOKENS * point.ok, llm
    assert llm.mismatched_requests == 0 and llm.token_events <= llm.output_tokens_server
    # A generator held up on a busy 2-core host may read a short answer's events in one go (counted, never hidden);
    # more than 1% of them would make the point invalid as buffered.
    assert ("buffered_stream" in codes) == (llm.buffered_requests > 0.01 * point.ok) and "token_mismatch" not in codes
    assert llm.input_tokens_per_s == pytest.approx(PROMPT_TOKENS * point.ok / point.measured_s)
    assert llm.output_tokens_per_s == pytest.approx(OUTPUT_TOKENS * point.ok / point.measured_s)
    assert llm.output_tokens_client > 0  # the client's own count of the text, kept beside the server's
    # Every latency from the intended time is at least the same latency from the send, and they nest as defined.
    assert llm.ttft_ms is not None and llm.ttft_sent_ms is not None and llm.ttft_ms.count == point.ok
    assert llm.ttft_ms.p50 >= llm.ttft_sent_ms.p50 - 0.01
    assert llm.itl_ms is not None and llm.tpot_ms is not None and llm.tpot_ms.count == point.ok
    assert point.latency_ms is not None and llm.ttft_ms.p50 <= point.latency_ms.p50
    assert llm.goodput_rps is not None and llm.goodput_share is not None
    assert llm.goodput_rps == pytest.approx(llm.goodput_share * point.ok / point.measured_s)
    assert point.valid == (not point.reasons)
    # vLLM's own view of the run (warm-up included): every request it finished carried exactly the asked lengths.
    server = llm.server
    assert server is not None and server.requests >= point.ok, server
    assert (server.prompt_tokens, server.generation_tokens) == (PROMPT_TOKENS * server.requests, OUTPUT_TOKENS * server.requests)
    assert server.ttft_ms_mean is not None and server.ttft_ms_mean > 0
    out = io.StringIO()
    Console(file=out, width=200).print(results_table(results))
    assert "language model" in out.getvalue() and f"{llm.output_tokens_asked}/{llm.output_tokens_server}/" in out.getvalue()
