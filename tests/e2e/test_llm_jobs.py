"""A language-model job end to end against a real vLLM (its CPU build): the canonical LLM generated and pushed by the
CLI, a YAML job submitted through the leader, run by a follower that starts vLLM, and the answer's figures: time to
first token, inter-token latency, time per output token and goodput, with the server's token counts matching what
was asked, and the server's own view of the run from its metrics.

vLLM is started by a follower where the claim is about that (its metrics, its options, two servers side by side):
four starts (the sweep's two, the comparison's, the prompt set's). Where the claim is about the client (closed loops,
traces, shards), one vLLM started by the module is driven as an endpoint (shared_vllm): one start for three tests,
each of which used to start its own. The goodput search on vLLM is `demo --llm`'s test (tests/e2e/test_demo.py).
Every server here runs eagerly (`enforce_eager`): ready in about 30 s on 2 cores rather than 60 s, since no claim here
is about vLLM's compiled speed (`demo --llm`, the user's path, runs vLLM as configured by default)."""

from __future__ import annotations

import io
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from rich.console import Console

from benchfleet.render import print_results
from common.stats import decode
from common.wire.jobs import JobResults
from follower.backends.llamacpp import LlamaCppBackend
from follower.backends.vllm import VllmBackend
from tests.e2e.test_walking_skeleton import _wait_done

pytestmark = pytest.mark.e2e
# What the raw HTTP client says of a reused connection the server closed before any byte of its answer.

RATE, DURATION_S, WARMUP_S = 40, 12, 2  # 480 measured requests: enough for a p99 claim
PROMPT_TOKENS, OUTPUT_TOKENS = 48, 16


@pytest.fixture(scope="module")
def llm_bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the module's language model is written (the upload, and what a vLLM started by hand serves)."""
    return tmp_path_factory.mktemp("llm") / "tiny-llama.zip"


@pytest.fixture(scope="module")
def llm_model(fleet, llm_bundle: Path) -> str:  # type: ignore[no-untyped-def]
    ok, why = VllmBackend.available()
    if not ok:
        # CI installs vLLM (scripts/install_vllm.sh) and must run this module, not skip it.
        if os.environ.get("CI"):
            pytest.fail(f"vLLM is required under CI: {why}")
        pytest.skip(why)
    fleet.start_follower("llm-host")
    out = llm_bundle
    cli = [sys.executable, "-m", "benchfleet", "models", "generate", "llama", "--layers", "2", "--hidden", "128",
           "--heads", "4", "--vocab", "2048", "--context", "512", "--seed", "5", "--out", str(out), "--push",
           "--name", "tiny-llama", "--url", fleet.url, "--token", fleet.admin_token]  # fmt: skip
    done = subprocess.run(cli, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "LlamaForCausalLM" in done.stdout and "tiny-llama:1" in done.stdout, done.stdout
    return "tiny-llama:1"


@pytest.mark.timeout(900)  # the module's first two vLLM starts, then 14 s of load on each (one server overloaded)
def test_an_llm_sweep_reports_ttft_itl_tpot_and_goodput_with_the_servers_token_counts_from_a_server_per_value(  # type: ignore[no-untyped-def]
    fleet, llm_model: str
) -> None:
    """One job, two vLLM configurations (a sweep over max_num_seqs), each started by the follower: every point has the
    server's token truth and the option reached its server; the unconstrained one carries the whole language-model
    answer (TTFT, ITL, TPOT, goodput, the server's own view, the wire audit), checked field by field. (Two tests
    until now, each starting its own servers: the sweep's and this answer's; one start fewer.)"""
    with fleet.client() as client:
        job = client.submit_yaml(f"""
name: llm-e2e
model: {llm_model}
backends: [vllm]
server: {{llm: {{enforce_eager: true}}}}
load: {{pattern: poisson, rate: {RATE}, duration: {DURATION_S}s, warmup: {WARMUP_S}s}}
llm: {{prompt_tokens: {PROMPT_TOKENS}, output_tokens: {OUTPUT_TOKENS}}}
slo: {{ttft_ms: 2000, tpot_ms: 500}}
sweep: {{llm.max_num_seqs: [2, 16]}}
audit: wire
""")
        results: JobResults = _wait_done(client, job.id, timeout_s=840)
        board = client.leaderboard(filters=[f"job_id={job.id}"], sort="index")
        by_ttft = client.leaderboard(sort="ttft", filters=[f"job_id={job.id}"])
    points = results.points
    assert [p.point.server.llm.max_num_seqs for p in points] == [2, 16]
    for each in points:  # each configuration's own server, the same token truth
        assert each.llm is not None and each.llm.server is not None and each.llm.mismatched_requests == 0, each.llm
        assert each.llm.output_tokens_asked == each.llm.output_tokens_server == OUTPUT_TOKENS * each.ok
    # The option reached each server: two sequences at a time queue the same load far longer than sixteen.
    queued = [p.llm.server.queue_ms_mean for p in points]  # type: ignore[union-attr]
    assert queued[0] is not None and queued[1] is not None and queued[0] > queued[1], queued
    assert [row.options for row in board.rows] == [
        '{"llm":{"enforce_eager":true,"max_num_seqs":2}}',
        '{"llm":{"enforce_eager":true,"max_num_seqs":16}}',
    ]
    out = io.StringIO()
    print_results(Console(file=out, width=200), results)
    assert "vllm max_num_seqs=2" in out.getvalue() and "vllm max_num_seqs=16" in out.getvalue()
    # The unconstrained server's answer, whole.
    point = points[1]
    llm = point.llm
    assert llm is not None and point.environment.backend_version.startswith("vllm"), point.environment
    # The leaderboard carries the language model's own columns, sortable by their short names.
    (row,) = [r for r in by_ttft.rows if r.options == board.rows[1].options]
    assert row.ttft_p99_ms == llm.ttft_ms.p99 and row.tokens_per_s == llm.output_tokens_per_s  # type: ignore[union-attr]
    assert row.goodput_rps == llm.goodput_rps and by_ttft.sort == "ttft_p99_ms"
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
    # As for tensor models: block-bootstrap CIs that hold the estimate, and a mergeable HDR histogram of every TTFT.
    assert llm.ttft_ci_ms is not None and set(llm.ttft_ci_ms) == {"p50", "p99"}
    low, high = llm.ttft_ci_ms["p99"]
    assert 0.99 * low <= llm.ttft_ms.p99 <= 1.01 * high  # the HDR estimate (3 significant digits) within its CI
    assert llm.ttft_hdr is not None and decode(llm.ttft_hdr).get_total_count() == point.ok
    assert llm.itl_ms is not None and llm.tpot_ms is not None and llm.tpot_ms.count == point.ok
    assert point.latency_ms is not None and llm.ttft_ms.p50 <= point.latency_ms.p50
    assert llm.goodput_rps is not None and llm.goodput_share is not None
    # The attainment is the share of every measured request (a failed one misses), with its Wilson interval.
    assert llm.goodput_rps == pytest.approx(llm.goodput_share * point.requests / point.measured_s)
    assert llm.goodput_of == point.requests and llm.goodput_ci is not None
    assert llm.goodput_ci[0] <= llm.goodput_share <= llm.goodput_ci[1]
    assert point.valid == (not point.reasons)
    # vLLM's own view of the run (warm-up included): every request it finished carried exactly the asked lengths.
    server = llm.server
    assert server is not None and server.requests >= point.ok, server
    assert (server.prompt_tokens, server.generation_tokens) == (PROMPT_TOKENS * server.requests, OUTPUT_TOKENS * server.requests)
    assert server.ttft_ms_mean is not None and server.ttft_ms_mean > 0
    assert set(server.quantiles) == {"ttft_p50", "ttft_p99", "itl_p50", "itl_p99"}  # its histograms' own percentiles
    assert server.quantiles["ttft_p50"].low_ms <= server.quantiles["ttft_p99"].ms
    # The stage breakdown joins the server's queue, prefill and decode to what the client saw beyond them.
    assert point.stages_ms is not None and set(point.stages_ms) == {"queue", "prefill", "decode", "transmission", "service"}
    assert llm.e2e_sent_ms is not None and point.stages_ms["service"] == pytest.approx(llm.e2e_sent_ms.mean)
    assert "language model" in out.getvalue() and f"{llm.output_tokens_asked}/{llm.output_tokens_server}/" in out.getvalue()
    # The point page draws each request's TTFT against its prompt length from the point's token records.
    with httpx.Client(base_url=fleet.url) as browser:
        assert browser.post("/login", data={"token": fleet.admin_token, "next": "/"}).status_code in (200, 303)
        page = browser.get(f"/jobs/{job.id}/points/1").text
        job_page = browser.get(f"/jobs/{job.id}").text
    assert "TTFT against prompt length, point #1 (each request)" in page
    # vLLM's gauges, read once per window through the point: its running batch and its KV cache in use, beside each
    # window's inter-token latency, drawn on the job page.
    measured = [w for w in point.windows if w.t_s >= 0]
    assert any(w.server_running is not None and w.server_running >= 0 for w in measured), measured
    assert any(w.kv_cache_usage is not None and 0 <= w.kv_cache_usage <= 1 for w in measured)
    assert any(w.itl_p50_ms is not None and w.itl_p50_ms > 0 for w in measured)
    for title in ("Timeline: KV-cache use per window", "ITL p50 against the", "Goodput: share of requests meeting the SLO"):
        assert title in job_page, title
    # The wire audit (`audit: wire`): every answered request found in the point's packets, token event for token event.
    wire = point.wire
    assert wire is not None
    if os.geteuid() != 0:
        assert not wire.ran and wire.why_not is not None and "CAP_NET_RAW" in wire.why_not
        return
    assert wire.ran and wire.interface not in (None, "all") and (wire.matched, wire.unmatched) == (point.ok, 0), (
        wire.unmatched_why,
        wire,
    )
    itl = wire.figure("itl")
    assert itl is not None and itl.count == llm.itl_ms.count and {f.name for f in wire.figures} >= {"ttft", "latency"}
    assert wire.token_us is not None and wire.token_us.count == itl.count + point.ok  # every token: a gap, or the first
    assert 'id="wire-figures"' in page and "wire audit" in out.getvalue()


@pytest.mark.timeout(600)  # two servers started, one after the other
def test_vllm_and_llamacpp_compared_on_the_same_model_and_load_with_token_truth(fleet, llm_model: str) -> None:  # type: ignore[no-untyped-def]
    """The same canonical LLM served by vLLM and by llama.cpp (converted to GGUF on the follower), the same workload:
    both points carry the full LLM figures, each server generated exactly what was asked and counted every prompt as
    the client built it, and the results and leaderboard set them side by side."""
    _needs_llamacpp()
    with fleet.client() as client:
        job = client.submit_yaml(f"""
name: vllm-vs-llamacpp
model: {llm_model}
backends: [vllm, llamacpp]
server: {{llm: {{max_num_seqs: 8, enforce_eager: true}}}}
load: {{allow_short: true, pattern: poisson, rate: 8, duration: 8s, warmup: 2s}}
llm: {{prompt_tokens: 40, output_tokens: 12}}
slo: {{ttft_ms: 2000, tpot_ms: 500}}
""")
        results: JobResults = _wait_done(client, job.id, timeout_s=540)
        board = client.leaderboard(filters=[f"job_id={job.id}"])
    by_backend = {p.point.backend: p for p in results.points}
    assert sorted(by_backend) == ["llamacpp", "vllm"]
    for backend, point in by_backend.items():
        llm = point.llm
        # Every request answered: llama.cpp ends a connection after each streamed answer (its Keep-Alive header says
        # otherwise), which once cost a request here as the client reused it; the pool now stops reusing them
        # (tests/integration/follower/test_openai_stream.py's claim).
        assert llm is not None and point.requests == 8 * 8 and point.ok == point.requests, (backend, point.error_sample)
        # Token truth on both servers: exactly the asked lengths, and every prompt counted as the client built it.
        assert llm.output_tokens_asked == llm.output_tokens_server == 12 * point.ok, (backend, llm)
        assert llm.mismatched_requests == 0 and "token_mismatch" not in [r.code for r in point.reasons], backend
        assert llm.input_tokens_per_s == pytest.approx(40 * point.ok / point.measured_s)
        assert llm.ttft_ms is not None and llm.tpot_ms is not None and llm.itl_ms is not None and llm.goodput_share is not None
        assert llm.ttft_ci_ms is not None and llm.goodput_ci is not None
    # llama.cpp's gauges give its slots in use (its running batch) but not its KV cache: absent, never 0.
    windows = [w for w in by_backend["llamacpp"].windows if w.t_s >= 0]
    assert any(w.server_running is not None for w in windows) and all(w.kv_cache_usage is None for w in windows)
    env = by_backend["llamacpp"].environment
    assert env.backend_version.startswith("llama.cpp"), env
    assert by_backend["vllm"].environment.backend_version.startswith("vllm")
    assert sorted(r.backend for r in board.rows) == ["llamacpp", "vllm"]
    out = io.StringIO()
    print_results(Console(file=out, width=200), results)
    assert "llamacpp" in out.getvalue() and "vllm" in out.getvalue()
    for backend, point in sorted(by_backend.items()):
        llm = point.llm
        assert llm is not None and llm.ttft_ms is not None and llm.tpot_ms is not None
        print(
            f"\n{backend}: TTFT p50 {llm.ttft_ms.p50:.1f} p99 {llm.ttft_ms.p99:.1f} ms, TPOT p99 {llm.tpot_ms.p99:.2f} ms, "
            f"{llm.output_tokens_per_s:.1f} tok/s, goodput {llm.goodput_share:.3f}"
        )


@pytest.mark.parametrize("backend", ["sglang", "triton-openai"])
def test_an_llm_job_on_the_other_servers(fleet, llm_model: str, backend: str) -> None:  # type: ignore[no-untyped-def]
    from follower.backends import BACKENDS

    ok, why = BACKENDS[backend].available()
    if not ok:
        pytest.skip(f"{backend} cannot run on this host: {why}")
    with fleet.client() as client:
        job = client.submit_yaml(f"""
name: llm-{backend}
model: {llm_model}
backends: [{backend}]
load: {{allow_short: true, pattern: poisson, rate: 5, duration: 4s, warmup: 1s}}
llm: {{prompt_tokens: 32, output_tokens: 8}}
""")
        results: JobResults = _wait_done(client, job.id, timeout_s=600)
    (point,) = results.points
    llm = point.llm
    assert llm is not None and point.ok == point.requests > 0, (point.error_sample, point.reasons)
    assert llm.mismatched_requests == 0 and llm.output_tokens_asked == llm.output_tokens_server
    assert llm.server is not None and llm.server.requests >= point.ok


def test_a_chat_job_from_an_uploaded_prompt_set_with_a_shared_prefix_matches_the_servers_counts(  # type: ignore[no-untyped-def]
    fleet, llm_model: str
) -> None:
    """A follower's own vLLM: the claim includes the server's metrics (its prefix cache) read from the server it
    started, and its prefix cache emptied before the point."""
    import json

    conversation = [{"role": "user", "content": "Hello, who are you?"}, {"role": "assistant", "content": "A small model."},
                    {"role": "user", "content": "What can you do?"}]  # fmt: skip
    lines = [{"conversation": conversation, "output_tokens": 6}, {"prompt": "Write a short poem about the sea."},
             {"messages": [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": "Why?"}]},
             {"prompt_tokens": 40, "output_tokens": 12}]  # fmt: skip
    content = "".join(json.dumps(line) + "\n" for line in lines).encode()
    with fleet.client() as client:
        prompts = client.upload_data(content, name="chat-set", format="prompts")
        assert (prompts.samples, prompts.fields) == (5, ["messages", "prompt", "prompt_tokens"])
        job = client.submit_yaml(f"""
name: llm-prompt-set
model: {llm_model}
backends: [vllm]
server: {{llm: {{enforce_eager: true, reset_prefix_cache: true}}}}
load: {{allow_short: true, pattern: poisson, rate: 10, duration: 4s, warmup: 1s}}
llm: {{api: chat, dataset: {prompts.id}, output_tokens: 8, shared_prefix: {{tokens: 160, share: 0.5}}}}
quality: {{agreement: true, answer_tokens: 6}}
""")
        results: JobResults = _wait_done(client, job.id, timeout_s=300)
    (point,) = results.points
    llm = point.llm
    assert llm is not None and point.ok == point.requests > 0, (point.error_sample, point.reasons)
    # Greedy completions of the set's five rows through vLLM's chat API, its tokens read from its `logprobs.content`.
    agreed = point.quality.completions if point.quality else None
    assert agreed is not None and agreed.tokens_from == "server" and (agreed.exact.hits, agreed.exact.samples) == (5, 5)
    # Every prompt the server counted (chat template, history, system prefix) is the length the follower built or
    # counted by the model's own tokenizer, and every answer had the length its row or the distribution asked.
    assert llm.mismatched_requests == 0, llm
    assert "token_mismatch" not in [r.code for r in point.reasons]
    assert llm.output_tokens_asked == llm.output_tokens_server
    server = llm.server
    assert server is not None and server.requests >= point.ok
    # Half the requests start with one 160-token prefix: the server's prefix cache, emptied before the point (vLLM's
    # development route), finds it within the point.
    assert server.prefix_cache_hit_share is not None and server.prefix_cache_hit_share > 0, server
    assert server.cache_reset is True, server


def test_an_embeddings_job_on_vllm_and_llamacpp_counts_texts_and_the_servers_tokens(fleet, llm_model: str) -> None:  # type: ignore[no-untyped-def]
    """llm.api embeddings: the follower starts vLLM as a pooling model and llama.cpp with --embeddings
    (server.llm.runner set by the job's api), sends four texts of exact lengths per request to /v1/embeddings, and reads
    each answer's usage: each server counted every text as built, and items per second are the texts embedded."""
    _needs_llamacpp()
    with fleet.client() as client:
        job = client.submit_yaml(f"""
name: llm-embeddings
model: {llm_model}
backends: [vllm, llamacpp]
server: {{llm: {{enforce_eager: true}}}}
load: {{pattern: poisson, rate: 10, duration: 3s, warmup: 1s, allow_short: true}}
llm: {{api: embeddings, prompt_tokens: 24, inputs_per_request: 4}}
""")
        results: JobResults = _wait_done(client, job.id, timeout_s=300)
    assert sorted(p.point.backend for p in results.points) == ["llamacpp", "vllm"]
    out = io.StringIO()
    print_results(Console(file=out, width=240), results, wide=True)
    for point in results.points:
        llm, backend = point.llm, point.point.backend
        assert point.point.server.llm.runner == "pooling"
        assert llm is not None and point.requests > 0 and point.ok == point.requests, (backend, point.error_sample)
        assert llm.mismatched_requests == 0 and "token_mismatch" not in [r.code for r in point.reasons], (backend, llm)
        assert llm.input_tokens_per_s * point.measured_s == pytest.approx(4 * 24 * point.ok, rel=1e-6)
        assert llm.items_per_s == pytest.approx(4 * point.ok / point.measured_s)
        assert llm.ttft_ms is None and llm.output_tokens_server == 0  # nothing is generated
        assert f"{llm.items_per_s:.1f}" in out.getvalue()


def test_a_rerank_job_on_vllm_scores_documents_with_a_reranker_and_the_servers_pair_tokens(  # type: ignore[no-untyped-def]
    fleet, llm_model: str, tmp_path: Path
) -> None:
    """llm.api rerank against a real server: the canonical LLM generated with a score head (a sequence classifier,
    what vLLM's /rerank serves), vLLM started by the follower as a pooling model, four documents of exact lengths
    scored against a query per request. vLLM's usage counts each query-document pair as the tokenizer joins them (the
    beginning of sequence before each): exactly 4 x (24 + 24) tokens a request; documents per second are the items."""
    out = tmp_path / "tiny-reranker.zip"
    shape = shlex.split("--layers 2 --hidden 128 --heads 4 --vocab 2048 --context 512 --seed 5 --head score")
    push = ["--push", "--name", "tiny-reranker", "--url", fleet.url, "--token", fleet.admin_token]
    cli = [sys.executable, "-m", "benchfleet", "models", "generate", "llama", *shape, "--out", str(out), *push]
    done = subprocess.run(cli, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0 and "LlamaForSequenceClassification" in done.stdout, done.stdout + done.stderr
    with fleet.client() as client:
        job = client.submit_yaml("""
name: llm-rerank
model: tiny-reranker:1
backends: [vllm]
server: {llm: {enforce_eager: true}}
load: {pattern: poisson, rate: 10, duration: 3s, warmup: 1s, allow_short: true}
llm: {api: rerank, prompt_tokens: 24, inputs_per_request: 4}
""")
        results: JobResults = _wait_done(client, job.id, timeout_s=300)
    (point,) = results.points
    llm = point.llm
    assert point.point.server.llm.runner == "pooling"
    assert llm is not None and point.requests > 0 and point.ok == point.requests, (point.error_sample, point.reasons)
    assert llm.input_tokens_per_s * point.measured_s == pytest.approx(4 * (24 + 24) * point.ok, rel=1e-6), llm
    assert llm.items_per_s == pytest.approx(4 * point.ok / point.measured_s)
    assert llm.ttft_ms is None and llm.output_tokens_server == 0  # scored, nothing generated


def _needs_llamacpp() -> None:
    ok, why = LlamaCppBackend.available()
    if not ok:
        if os.environ.get("CI"):
            pytest.fail(f"llama.cpp is required under CI: {why}")  # scripts/install_llamacpp.sh builds it
        pytest.skip(why)


def test_agentic_sessions_on_llamacpp_show_its_slots_prefix_cache(fleet, llm_model: str) -> None:  # type: ignore[no-untyped-def]
    """The repository's session sample replayed on a llama.cpp the follower starts, its slots' caches erased before
    the point: llama.cpp's own counters (its /metrics: the prompt tokens it computed and those its slots' caches held)
    add up to every prompt exactly as the trace grows each session's context, and its prefix-cache hit share (the
    cached ones' share) is shown beside TTFT."""
    import json

    _needs_llamacpp()
    sample = Path(__file__).resolve().parents[2] / "docs" / "traces" / "mooncake_sessions.jsonl"
    entries = [json.loads(line) for line in sample.read_text().splitlines()]
    context: dict[str, int] = {}
    prompts = 0
    for e in entries:  # each turn's prompt: the session's context so far and its new message
        context[e["session_id"]] = context.get(e["session_id"], 0) + e["input_length"]
        prompts += context[e["session_id"]]
        context[e["session_id"]] += e["output_length"]
    with fleet.client() as client:
        trace = client.upload_data(sample.read_bytes(), name="agent-sessions-llamacpp", format="trace")
        job = client.submit_yaml(f"""
name: llamacpp-sessions
model: {llm_model}
backends: [llamacpp]
server: {{llm: {{reset_prefix_cache: true}}}}
load: {{pattern: trace, trace: {{dataset: {trace.id}}}, duration: 20s, warmup: 0s}}
llm: {{sessions: {{from_trace: true}}}}
""")
        results: JobResults = _wait_done(client, job.id, timeout_s=300)
    (point,) = results.points
    llm = point.llm
    assert llm is not None and point.requests == len(entries) and point.ok == point.requests, point.error_sample
    assert llm.mismatched_requests == 0 and llm.output_tokens_server == sum(e["output_length"] for e in entries)
    server = llm.server
    assert server is not None and server.requests is None, server  # llama.cpp counts tokens, not requests
    assert server.cache_reset is True, server
    assert server.prompt_tokens == prompts and server.generation_tokens == llm.output_tokens_server, (server, prompts)
    assert server.prefix_cache_hit_share is not None and 0 < server.prefix_cache_hit_share < 1, server
    out = io.StringIO()
    print_results(Console(file=out, width=240), results, wide=True)
    assert f"{100 * server.prefix_cache_hit_share:.0f}%" in out.getvalue()


@pytest.fixture(scope="module")
def shared_vllm(fleet, llm_model: str, llm_bundle: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:  # type: ignore[no-untyped-def]
    """One vLLM the tests start themselves (no follower's), driven as an OpenAI endpoint by the tests whose claim is about
    the client (its search, its workloads, its token counting) rather than about a follower starting vLLM: one start
    for all of them. These tests come last in the module, after the tests whose followers start vLLMs of their own."""
    from common.spec.server import LlmServerOptions, ServerOptions

    with fleet.client() as client:
        meta = next(m for m in client.models() if m.ref == llm_model)
    vllm = VllmBackend(server=ServerOptions(llm=LlmServerOptions(enforce_eager=True)))
    try:
        vllm.start(llm_bundle, meta, tmp_path_factory.mktemp("shared-vllm"))
        vllm.wait_ready(600)
        yield vllm.endpoint
    finally:
        vllm.stop()


def test_a_closed_loop_of_llm_users_reports_per_request_tokens(fleet, llm_model: str, shared_vllm: str) -> None:  # type: ignore[no-untyped-def]
    with fleet.client() as client:
        job = client.submit_yaml(f"""
name: llm-closed
model: {llm_model}
target: {{url: "{shared_vllm}", protocol: openai}}
load: {{pattern: closed, concurrency: 4, duration: 3s, warmup: 1s}}
llm: {{prompt_tokens: {{dist: uniform, min: 8, max: 64}}, output_tokens: {{dist: uniform, min: 2, max: 12}}}}
quality: {{agreement: true, max_samples: 6, answer_tokens: 8}}
""")
        results: JobResults = _wait_done(client, job.id, timeout_s=300)
    (point,) = results.points
    llm = point.llm
    assert llm is not None and point.requests > 0 and point.ok == point.requests, (point.error_sample, point.reasons)
    # Greedy completions through vLLM's completions API: its tokens read from its `logprobs` (the reference is this
    # one configuration, so every completion agrees with itself).
    agreed = point.quality.completions if point.quality else None
    assert agreed is not None and agreed.tokens_from == "server" and agreed.tokens is not None, point.quality
    assert (agreed.exact.hits, agreed.exact.samples, agreed.differing) == (6, 6, 0) and agreed.tokens.value == 1.0
    # Four users cycling through bodies of different lengths: each request is checked against the body it sent.
    assert llm.mismatched_requests == 0 and llm.output_tokens_asked == llm.output_tokens_server, llm
    # No schedule: a request is due when its user is free, so TTFT from the intended time is TTFT from the send.
    assert llm.ttft_ms is not None and llm.ttft_sent_ms is not None and llm.ttft_ms.p50 == llm.ttft_sent_ms.p50


def test_a_trace_replays_each_requests_recorded_lengths(fleet, llm_model: str, shared_vllm: str) -> None:  # type: ignore[no-untyped-def]
    entries = [(100 * k, 8 + 4 * k, 2 + k % 5) for k in range(20)]  # t_ms, prompt_tokens, output_tokens
    content = ("t_ms,prompt_tokens,output_tokens\n" + "".join(f"{t},{p},{o}\n" for t, p, o in entries)).encode()
    with fleet.client() as client:
        trace = client.upload_data(content, name="llm-trace", format="trace")
        job = client.submit_yaml(f"""
name: llm-trace
model: {llm_model}
target: {{url: "{shared_vllm}", protocol: openai}}
load: {{pattern: trace, trace: {{dataset: {trace.id}}}, duration: 2s}}
llm: {{output_tokens: 64}}
""")
        results: JobResults = _wait_done(client, job.id, timeout_s=300)
    (point,) = results.points
    llm = point.llm
    assert llm is not None and point.requests == len(entries) and point.ok == point.requests, (point.error_sample,)
    # Each request asked for its entry's output length (not the workload's 64) and the server agreed on every prompt.
    assert llm.output_tokens_asked == llm.output_tokens_server == sum(o for _, _, o in entries), llm
    assert llm.mismatched_requests == 0
    assert llm.input_tokens_per_s * point.measured_s == pytest.approx(sum(p for _, p, _ in entries), rel=1e-6)


def test_a_mooncake_trace_replays_its_prefix_reuse_into_the_servers_cache(fleet, llm_model: str, shared_vllm: str) -> None:  # type: ignore[no-untyped-def]
    """The repository's Mooncake sample (three conversations sharing a system prompt, each turn extending its history)
    against the same trace with every hash id made unique: vLLM's own prefix cache, read from the endpoint's /metrics
    over each point's run, finds more of the first. The bytes sharing exactly the prefixes the ids say is
    tests/unit/follower/test_prefix_blocks.py's claim."""
    import json

    sample = Path(__file__).resolve().parents[2] / "docs" / "traces" / "mooncake_trace.jsonl"
    entries = [json.loads(line) for line in sample.read_text().splitlines()]
    scrambled = "".join(
        json.dumps(e | {"hash_ids": [10_000 + 100 * n + k for k in range(len(e["hash_ids"]))]}) + "\n"
        for n, e in enumerate(entries)
    )
    hit_share = {}
    with fleet.client() as client:
        # The scrambled trace first: its blocks are new to the server, and none of them is the sample's.
        for name, content in (("scrambled", scrambled.encode()), ("mooncake", sample.read_bytes())):
            trace = client.upload_data(content, name=f"{name}-trace", format="trace")
            assert trace.fields == ["hash_ids", "output_tokens", "prompt_tokens", "t"]
            job = client.submit_yaml(f"""
name: {name}-trace
model: {llm_model}
target: {{url: "{shared_vllm}", protocol: openai}}
load: {{pattern: trace, trace: {{dataset: {trace.id}, block_tokens: 32}}, duration: 4s, warmup: 0s}}
llm: {{output_tokens: 64}}
""")
            results: JobResults = _wait_done(client, job.id, timeout_s=300)
            (point,) = results.points
            llm = point.llm
            assert llm is not None and point.requests == len(entries) and point.ok == point.requests, point.error_sample
            # every prompt is its entry's input_length as vLLM counted it, every answer its output_length
            assert llm.mismatched_requests == 0 and llm.output_tokens_server == sum(e["output_length"] for e in entries)
            # the endpoint's own counters over the point: its requests and prompt tokens, and its prefix cache
            view = llm.server
            assert view is not None and view.requests == len(entries) and view.prefix_cache_hit_share is not None, view
            assert view.prompt_tokens == sum(e["input_length"] for e in entries), view
            hit_share[name] = view.prefix_cache_hit_share
    # Scrambled, no two prompts share a block (their first token, the tokenizer's, is less than one of vLLM's blocks).
    assert hit_share["scrambled"] == 0.0, hit_share
    # The sample's reuse, found at most in whole blocks of vLLM's own size: what the ids share, cut to those blocks, is
    # the most it can find (less where a request comes while the one it shares with is still being computed).
    config = httpx.get(f"{shared_vllm}/metrics", timeout=10).text
    block = int(re.search(r'vllm:cache_config_info\{[^}]*block_size="(\d+)"', config).group(1))  # type: ignore[union-attr]
    found, seen = 0, []
    for entry in entries:
        ids = entry["hash_ids"]
        shared = max(
            (next((k for k, (a, b) in enumerate(zip(ids, s, strict=False)) if a != b), min(len(ids), len(s))) for s in seen),
            default=0,
        )
        found += (min(1 + 32 * shared, entry["input_length"] - 1) // block) * block  # BOS, then the shared blocks' words
        seen.append(ids)
    assert 0 < hit_share["mooncake"] <= found / sum(e["input_length"] for e in entries), (hit_share, block, found)


def test_agentic_sessions_grow_their_context_turn_by_turn_and_reuse_the_servers_prefix_cache(  # type: ignore[no-untyped-def]
    fleet, llm_model: str, shared_vllm: str
) -> None:
    """Sessions of 5-20 turns with think time and sub-agent fan-out against vLLM: every turn's prompt is its session's
    context so far (the server counted each as built), the first turn's exactly the asked length and each later turn
    at least a turn's growth longer, per-turn TTFT for every turn index, and vLLM's prefix cache finding the earlier
    turns in the later ones. That a turn waits exactly its think time after the answers before it, and the same seed
    gives the same sessions, is tests/integration/follower/test_sessions.py's claim; how TTFT rises with the turn is
    bench/llm.py's (a figure of the host, not a test's)."""
    first, output, user = 16, 8, 8
    with fleet.client() as client:
        job = client.submit_yaml(f"""
name: llm-agentic
model: {llm_model}
target: {{url: "{shared_vllm}", protocol: openai}}
load: {{pattern: poisson, rate: 0.5, duration: 16s, warmup: 0s, allow_short: true}}
llm:
  prompt_tokens: {first}
  output_tokens: {output}
  sessions: {{turns: {{dist: uniform, min: 5, max: 20}}, user_tokens: {user}, think_s: {{dist: exponential, mean: 0.2}},
             fan_out: {{share: 0.2, width: 2}}}}
slo: {{ttft_ms: 5000}}
""")
        results: JobResults = _wait_done(client, job.id, timeout_s=300)
    (point,) = results.points
    llm = point.llm
    assert llm is not None and point.requests > 0 and point.ok == point.requests, (point.error_sample, point.reasons)
    assert llm.mismatched_requests == 0 and llm.output_tokens_asked == llm.output_tokens_server, llm
    sessions = llm.sessions
    assert sessions is not None and sessions.started >= 2 and sessions.failed == 0, sessions
    assert sessions.started == sessions.completed + sessions.cut and 1 <= sessions.turns_mean <= 20, sessions
    turns = sessions.by_turn
    assert [t.turn for t in turns] == list(range(len(turns))) and 5 <= len(turns) <= 20, turns
    assert turns[0].prompt_tokens_mean == first and turns[0].requests == sessions.started
    for t in turns[1:]:  # the context grows by at least the answer and the new message each turn
        assert t.prompt_tokens_mean >= first + t.turn * (output + user), t
        assert t.ttft_ms is not None and t.ttft_ms.count == t.requests, t
    assert sum(t.requests for t in turns) == point.requests
    if sessions.completed:
        assert sessions.session_ms is not None and sessions.tokens_mean is not None and sessions.goodput_share is not None
    server = llm.server
    assert server is not None and server.prefix_cache_hit_share is not None and server.prefix_cache_hit_share > 0, server
    # What the CLI draws: the hit share beside TTFT, and a row per turn with its context and TTFT.
    out = io.StringIO()
    print_results(Console(file=out, width=240), results, wide=True)
    drawn = out.getvalue()
    assert f"{100 * server.prefix_cache_hit_share:.0f}%" in drawn and f"{sessions.started} sessions started" in drawn
    rows = [line.split() for line in drawn.splitlines() if line.split()[:1] in ([str(t.turn)] for t in turns)]
    for t in turns:
        assert [str(t.turn), str(t.requests), f"{t.prompt_tokens_mean:.0f}"] in [row[:3] for row in rows], (t, drawn)


def test_a_session_trace_replayed_twice_against_vllm_gives_the_same_turns_lengths_and_arrivals(  # type: ignore[no-untyped-def]
    fleet, llm_model: str, shared_vllm: str
) -> None:
    """The repository's session sample (Mooncake lines with session_id and delay: 6 sessions of 5-9 turns with tool and
    user pauses) replayed twice in one job (repeats: 2) against vLLM: each replay starts every session at its
    timestamp, and every turn's prompt is its session's context as the trace grows it (the server counted each), the
    same per turn index both times; vLLM's prefix cache finds the earlier turns in the later ones. That each turn is
    due exactly its delay after the answer before it is tests/integration/follower/test_sessions.py's claim."""
    import json

    from common.wire.records import decode as decode_records

    sample = Path(__file__).resolve().parents[2] / "docs" / "traces" / "mooncake_sessions.jsonl"
    entries = [json.loads(line) for line in sample.read_text().splitlines()]
    contexts: dict[str, list[int]] = {}  # each session's prompt per turn, as the trace grows it
    answered: dict[str, int] = {}  # each session's last answer
    for e in entries:
        sid, turns = e["session_id"], contexts.setdefault(e["session_id"], [])
        turns.append(turns[-1] + answered[sid] + e["input_length"] if turns else e["input_length"])
        answered[sid] = e["output_length"]
    arrivals = sorted(e["timestamp"] * 1_000_000 for e in entries if "timestamp" in e)
    with fleet.client() as client:
        trace = client.upload_data(sample.read_bytes(), name="agent-sessions", format="trace")
        job = client.submit_yaml(f"""
name: llm-session-trace
model: {llm_model}
target: {{url: "{shared_vllm}", protocol: openai}}
load: {{pattern: trace, trace: {{dataset: {trace.id}}}, duration: 20s, warmup: 0s}}
llm: {{sessions: {{from_trace: true}}}}
repeats: 2
""")
        results: JobResults = _wait_done(client, job.id, timeout_s=300)
    assert len(results.points) == 2
    by_turn = []
    for point in results.points:
        llm = point.llm
        assert llm is not None and point.requests == len(entries) and point.ok == point.requests, point.error_sample
        assert llm.mismatched_requests == 0 and llm.output_tokens_server == sum(e["output_length"] for e in entries)
        sessions = llm.sessions
        assert sessions is not None and (sessions.started, sessions.completed, sessions.failed) == (6, 6, 0), sessions
        # per turn index: its requests and their mean context, as the trace grows each session's
        expected = [[c[t] for c in contexts.values() if len(c) > t] for t in range(max(map(len, contexts.values())))]
        assert [t.requests for t in sessions.by_turn] == [len(e) for e in expected]
        assert [t.prompt_tokens_mean for t in sessions.by_turn] == pytest.approx([sum(e) / len(e) for e in expected])
        by_turn.append([(t.turn, t.requests, t.prompt_tokens_mean) for t in sessions.by_turn])
        # each request's prompt as vLLM counted it, and each session's arrival at its timestamp from the run's start
        url = f"{fleet.url}/api/v1/jobs/{results.job.id}/points/{point.point.index}/records"
        response = httpx.get(url, headers={"Authorization": f"Bearer {fleet.admin_token}"}, timeout=30)
        assert response.status_code == 200, response.text
        records = decode_records(response.content)
        assert sorted(records["llm_prompt_tokens"].tolist()) == sorted(c for turns in contexts.values() for c in turns)
        offsets = set((records["intended_ns"] - int(records["start_ns"].ravel()[0])).tolist())
        assert set(arrivals) <= offsets, (arrivals, sorted(offsets))
        server = llm.server
        assert server is not None and server.prefix_cache_hit_share is not None and server.prefix_cache_hit_share > 0
    assert by_turn[0] == by_turn[1]


@pytest.mark.parametrize(
    ("protocol", "api", "lengths"),
    [("openai", "responses", "ignore_eos: true"), ("anthropic", "messages", "ignore_eos: false")],
)
def test_the_responses_and_messages_apis_driven_against_vllm(  # type: ignore[no-untyped-def]
    fleet, llm_model: str, shared_vllm: str, protocol: str, api: str, lengths: str
) -> None:
    """OpenAI's Responses API (routed at an OpenAI-compatible target's origin) and Anthropic's Messages API (a target
    of that protocol) against vLLM, which serves both: every answer's events read as the API streams them, its token
    events timed, the prompt counted by the server as built from the chat template, and (Responses, whose length
    vLLM enforces) every answer exactly as long as asked. The events' reading, token by token, is
    tests/unit/follower/test_llm_events.py's claim."""
    with fleet.client() as client:
        job = client.submit_yaml(f"""
name: llm-{api}
model: {llm_model}
target: {{url: "{shared_vllm}", protocol: {protocol}}}
load: {{pattern: poisson, rate: 5, duration: 3s, warmup: 1s, allow_short: true}}
llm: {{api: {api}, prompt_tokens: 32, output_tokens: 8, {lengths}}}
""")
        results: JobResults = _wait_done(client, job.id, timeout_s=300)
    (point,) = results.points
    llm = point.llm
    assert llm is not None and point.requests > 0 and point.ok == point.requests, (point.error_sample, point.reasons)
    assert llm.mismatched_requests == 0 and "token_mismatch" not in [r.code for r in point.reasons], llm
    assert llm.ttft_ms is not None and llm.ttft_ms.count == point.requests and llm.itl_ms is not None, llm
    # vLLM's Responses API counts every prompt one token longer than the chat template renders it (its own rendering):
    # kept as the point's offset and shown, every request agreeing with it; its Messages API counts as built.
    rendering = 1 if api == "responses" else 0
    assert (llm.prompt_rendering_tokens or 0) == rendering, llm
    assert llm.input_tokens_per_s * point.measured_s == pytest.approx((32 + rendering) * point.requests, rel=1e-6)
    if rendering:
        out = io.StringIO()
        print_results(Console(file=out, width=240), results, wide=True)
        assert "counted every prompt 1 token longer than it was built" in out.getvalue()
    if api == "responses":
        assert llm.output_tokens_asked == llm.output_tokens_server == 8 * point.requests, llm
    else:  # Messages cannot be asked for an exact length: an answer may end at the model's end of sequence
        assert 0 < llm.output_tokens_server <= llm.output_tokens_asked == 8 * point.requests, llm
    # vLLM's own counters over the point (its /metrics): the same requests
    assert llm.server is not None and llm.server.requests >= point.ok, llm.server


def test_the_responses_api_on_a_llamacpp_the_follower_starts(fleet, llm_model: str) -> None:  # type: ignore[no-untyped-def]
    """llama.cpp serves OpenAI's Responses API too: on a llama.cpp the follower starts, every answer's events read as
    the API streams them and timed, every prompt counted by the server exactly as the chat template renders it, and
    every answer exactly as long as asked (it takes ignore_eos there). Its Messages API is not offered: its stream
    leaves out message_start, and the prompt's count with it, when the first token is part of a character."""
    _needs_llamacpp()
    with fleet.client() as client:
        job = client.submit_yaml(f"""
name: llamacpp-responses
model: {llm_model}
backends: [llamacpp]
load: {{pattern: poisson, rate: 5, duration: 3s, warmup: 1s, allow_short: true}}
llm: {{api: responses, prompt_tokens: 32, output_tokens: 8}}
""")
        results: JobResults = _wait_done(client, job.id, timeout_s=300)
    (point,) = results.points
    llm = point.llm
    assert llm is not None and point.requests > 0 and point.ok == point.requests, (point.error_sample, point.reasons)
    assert llm.mismatched_requests == 0 and "token_mismatch" not in [r.code for r in point.reasons], llm
    assert llm.ttft_ms is not None and llm.ttft_ms.count == point.requests and llm.itl_ms is not None, llm
    assert llm.prompt_rendering_tokens is None, llm  # rendered as the chat template renders it: no offset
    assert llm.input_tokens_per_s * point.measured_s == pytest.approx(32 * point.requests, rel=1e-6)
    assert llm.output_tokens_asked == llm.output_tokens_server == 8 * point.requests, llm


def test_a_vllm_endpoint_driven_by_one_follower_and_by_two_at_once(fleet, llm_model: str, shared_vllm: str) -> None:  # type: ignore[no-untyped-def]
    """An OpenAI-compatible endpoint (a vLLM the test starts, no follower's), with prompts built by the model's own
    tokenizer from the repository: driven by one follower, then by two at once, whose token records merge into one
    point on the coordinator, every request's first token and the server's exact counts included, and the client's
    token counts of the other shard's texts arrive with its records."""
    labels = {"BENCHFLEET_FOLLOWER_LABELS": '{"pool": "llm-shards"}'}
    for follower in ("llm-shard-a", "llm-shard-b"):
        fleet.start_follower(follower, env=labels)
    with fleet.client() as client:
        single = _wait_done(
            client,
            client.submit_yaml(f"""
name: llm-endpoint
model: {llm_model}
load: {{allow_short: true, pattern: poisson, rate: 8, duration: 4s, warmup: 1s}}
llm: {{prompt_tokens: 32, output_tokens: 8}}
target: {{url: "{shared_vllm}", protocol: openai}}
""").id,
            timeout_s=300,
        )
        job = client.submit_yaml(f"""
name: llm-shards
model: {llm_model}
load: {{allow_short: true, pattern: poisson, rate: 16, duration: 6s, warmup: 1s}}
llm: {{prompt_tokens: 32, output_tokens: 8}}
target: {{url: "{shared_vllm}", protocol: openai, shards: {{count: 2, labels: {{pool: llm-shards}}}}}}
""")
        results: JobResults = _wait_done(client, job.id, timeout_s=300)
        parts = [client.job(p) for p in client.job(job.id).parts]
        other = client.results(parts[1].id).points[0]
    (alone,) = single.points
    assert alone.llm is not None and alone.point.backend == "endpoint" and alone.cold_start is None
    assert alone.ok == alone.requests == 8 * 4, (alone.error_sample, alone.reasons)
    assert alone.llm.output_tokens_asked == alone.llm.output_tokens_server == 8 * alone.ok
    assert alone.llm.mismatched_requests == 0 and alone.llm.ttft_ms is not None and alone.llm.ttft_ms.count == alone.ok
    (point,) = results.points
    llm, codes = point.llm, [r.code for r in point.reasons]
    assert [(s.shard, s.follower_id in ("llm-shard-a", "llm-shard-b"), s.state) for s in point.shards] == [
        (0, True, "merged"),
        (1, True, "merged"),
    ], point.shards
    assert not {"shard_lost", "shard_absent"} & set(codes), point.reasons
    assert llm is not None and point.requests == 16 * 6 and point.ok == point.requests, (point.error_sample, codes)
    # Both shards' token records are in: a first token for every request, and the server's exact counts.
    assert llm.ttft_ms is not None and llm.ttft_ms.count == point.ok
    assert llm.output_tokens_asked == llm.output_tokens_server == 8 * point.ok and llm.mismatched_requests == 0
    # Shard 1's own share, as its part reports it: part of the whole, its client counts carried into the merge
    # (per request, the merged count matches the share's; without them it would be about half).
    share = other.llm
    assert share is not None and 0 < other.requests < point.requests and share.output_tokens_client > 0
    per_request, share_per_request = llm.output_tokens_client / point.ok, share.output_tokens_client / other.ok
    assert abs(per_request - share_per_request) < 0.25 * share_per_request, (llm, share)


@pytest.mark.timeout(600)
def test_a_vllm_run_by_benchfleet_and_by_vllm_bench_serve_compared_across_tools(  # type: ignore[no-untyped-def]
    fleet, llm_model: str, llm_bundle: Path, shared_vllm: str, tmp_path: Path
) -> None:
    """The same vLLM driven by benchfleet and by `vllm bench serve --save-result --save-detailed` (vLLM's own client, from
    vLLM's environment), its result imported by the CLI: one compare keys the two on pattern and load, not judged until
    asked; asked, it sets benchfleet's figures beside benchfleet's definitions recomputed from vLLM's own per-request
    records (the numbers the imported point carries, exactly), and says which definitions differ and by how much."""
    import json

    from common.formats import hfbundle
    from common.formats.llmd_report import validate_report

    with fleet.client() as client:
        ours = client.submit_yaml(f"""
name: llm-ours
model: {llm_model}
load: {{allow_short: true, pattern: poisson, rate: 4, duration: 6s, warmup: 1s}}
llm: {{prompt_tokens: 32, output_tokens: 16}}
target: {{url: "{shared_vllm}", protocol: openai}}
""")
        mine = _wait_done(client, ours.id, timeout_s=300)
    tokenizer = hfbundle.extract(io.BytesIO(llm_bundle.read_bytes()), tmp_path / "tokenizer", 10**9)
    out = tmp_path / "vllm-bench.json"
    code = (
        "import argparse, sys\nfrom vllm.benchmarks.serve import add_cli_args, main\n"
        "p = argparse.ArgumentParser(); add_cli_args(p); main(p.parse_args(sys.argv[1:]))\n"
    )
    flags = shlex.split(
        "--backend openai --endpoint /v1/completions --dataset-name random --random-input-len 32 --random-output-len 16 "
        "--ignore-eos --num-prompts 24 --request-rate 4 --seed 3 --percentile-metrics ttft,tpot,itl,e2el "
        "--metric-percentiles 50,90,99 --save-result --save-detailed"
    )
    argv = [str(VllmBackend.interpreter()), "-c", code, *flags, "--base-url", shared_vllm, "--model", llm_model.split(":")[0]]
    argv += ["--tokenizer", str(tokenizer), "--result-filename", str(out)]
    ran = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
    assert ran.returncode == 0, (ran.stdout + ran.stderr)[-2000:]
    saved = json.loads(out.read_text())
    cli = [sys.executable, "-m", "benchfleet", "import", str(out), "--url", fleet.url, "--token", fleet.admin_token]
    imported = subprocess.run(cli, capture_output=True, text=True, timeout=60, check=False)
    assert imported.returncode == 0, imported.stdout + imported.stderr
    theirs = imported.stdout.split("job ", 1)[1].split(",", 1)[0]
    with fleet.client() as client:
        (point,) = client.results(theirs).points
        unasked = client.compare(theirs, ours.id)
        asked = client.compare(theirs, ours.id, include_imported=True)
    # vLLM's figures as its file has them, under its definitions; benchfleet's from the same file's records.
    assert point.imported is not None and point.llm is not None and point.llm.ttft_ms is not None
    assert point.llm.ttft_ms.p99 == saved["p99_ttft_ms"] and point.ok == saved["completed"] == 24
    mine_from_theirs = point.imported.recomputed
    assert mine_from_theirs is not None and mine_from_theirs.requests == 24
    (pair,) = unasked.points
    assert pair.key == "poisson|4 req/s" and pair.verdict == "not_judged" and unasked.not_judged == 1
    assert pair.a_tool == "vllm" and pair.b_tool is None
    assert any("its latency from its send stamp to the last byte (not from the scheduled time)" in d for d in pair.definitions)
    (judged,) = asked.points
    # Asked, the imported side counts as judged; benchfleet's own point of 24 requests is too short for a p99 claim, so
    # the pair is "invalid" on benchfleet's side alone (the agreement of the figures is bench/import_agreement.py's).
    assert judged.a_valid is True and asked.not_judged == 0
    assert judged.verdict == "invalid" and judged.b_valid is False and "a p99 needs" in judged.b_reasons[0]
    ttft = next(m for m in judged.llm if m.metric == "ttft_p99_ms")
    (bench_point,) = mine.points
    assert bench_point.llm is not None and bench_point.llm.ttft_ms is not None
    assert ttft.a == mine_from_theirs.ttft_p99_ms and ttft.b == pytest.approx(bench_point.llm.ttft_ms.p99)
    moved = next(d for d in judged.definitions if "recomputed from its 24 records" in d)
    assert f"ttft p99 {100 * mine_from_theirs.shift['ttft_p99_ms']:+.1f}%" in moved
    # Benchfleet's own run travels the other way: an llm-d benchmark report v0.2 that its schema takes.
    with fleet.client() as client:
        (report,) = json.loads(client.export(ours.id, "llm-d"))
    assert validate_report(report) == []
    ttft_report = report["results"]["request_performance"]["aggregate"]["latency"]["time_to_first_token"]
    assert ttft_report["units"] == "ms" and ttft_report["p99"] == bench_point.llm.ttft_ms.p99
