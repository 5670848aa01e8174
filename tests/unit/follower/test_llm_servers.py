"""The LLM servers besides vLLM: SGLang and Triton's OpenAI frontend. Their command lines and model repository carry
the spec's server options in each server's own words; their metrics become the same server view as vLLM's. Where a
server's environment is not installed (here: both need CUDA builds or NVIDIA's containers), it says why, and a job
naming it is checked at submission and its run skipped with that reason."""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from common.spec.job import JobSpec
from common.spec.server import LlmServerOptions, ServerOptions
from common.spec.sweep import configurations
from common.wire.models import LlmParams, ModelMeta
from follower.backends import BACKENDS, LlamaCppBackend, SglangBackend, TritonOpenAiBackend, VllmBackend, available_backends
from follower.backends.llmserver import parse_metrics
from follower.backends.stats import llm_server_delta

MODEL = ModelMeta(name="tiny", version="1", format="hf", inputs=[], outputs=[], sha256="-", size_bytes=1,
                  created_at=datetime.now(UTC), llm=LlmParams(architecture="LlamaForCausalLM", model_type="llama",
                                                              parameters=1, context_length=2048, vocab_size=2048))  # fmt: skip
OPTIONS = ServerOptions(llm=LlmServerOptions(max_num_batched_tokens=512, max_num_seqs=8, prefix_caching=False,
                                             dtype="bfloat16"))  # fmt: skip


def test_sglangs_command_line_says_the_spec_in_its_own_words(tmp_path: Path) -> None:
    argv = SglangBackend(server=OPTIONS).argv(tmp_path / "model", MODEL, 4321, tmp_path)
    assert argv[1:3] == ["-m", "sglang.launch_server"]
    pairs = dict(zip(argv[3::1], argv[4::1], strict=False))
    assert pairs["--model-path"] == str(tmp_path / "model") and pairs["--served-model-name"] == "tiny"
    assert (pairs["--port"], pairs["--host"], pairs["--dtype"]) == ("4321", "127.0.0.1", "bfloat16")
    assert (pairs["--chunked-prefill-size"], pairs["--max-running-requests"]) == ("512", "8")
    assert pairs["--context-length"] == "2048" and pairs["--device"] == "cpu"
    assert "--disable-radix-cache" in argv and "--enable-metrics" in argv
    gpu = SglangBackend(server=ServerOptions(device="cuda:1")).argv(tmp_path, MODEL, 1, tmp_path)
    assert "--device" not in gpu and "--disable-radix-cache" not in gpu


def test_eager_mode_reaches_every_llm_server_in_its_own_words(tmp_path: Path) -> None:
    """`enforce_eager`: vLLM's flag, Triton's vLLM engine argument, SGLang's CUDA graphs off, llama.cpp's graphs off;
    unset, no server is told anything."""
    eager = ServerOptions(llm=LlmServerOptions(enforce_eager=True))
    vllm = VllmBackend(server=eager).argv(tmp_path / "model", MODEL, 1, tmp_path)
    assert "--enforce-eager" in vllm and "--enforce-eager" not in VllmBackend(server=OPTIONS).argv(tmp_path, MODEL, 1, tmp_path)
    assert "--disable-cuda-graph" in SglangBackend(server=eager).argv(tmp_path / "model", MODEL, 1, tmp_path)
    assert "--disable-cuda-graph" not in SglangBackend(server=OPTIONS).argv(tmp_path / "model", MODEL, 1, tmp_path)
    argv = TritonOpenAiBackend(server=eager).argv(tmp_path / "model", MODEL, 1, tmp_path)
    engine = json.loads((Path(argv[argv.index("--model-repository") + 1]) / "tiny" / "1" / "model.json").read_text())
    assert engine["enforce_eager"] is True
    assert LlamaCppBackend(server=eager).environment()["GGML_CUDA_DISABLE_GRAPHS"] == "1"
    assert "GGML_CUDA_DISABLE_GRAPHS" not in LlamaCppBackend(server=OPTIONS).environment()
    spec = JobSpec.model_validate(
        {"name": "j", "model": "tiny:1", "backends": ["vllm"], "load": {"rate": 10, "duration": "1s"},
         "sweep": {"llm.enforce_eager": [True, False]}}
    )
    assert [c.llm.enforce_eager for c in configurations(spec.sweep or {}, spec.server)] == [True, False]


def test_sglang_refuses_a_kv_cache_size_in_bytes_at_submission() -> None:
    spec = {
        "name": "j",
        "model": "tiny:1",
        "backends": ["sglang"],
        "server": {"llm": {"kv_cache_gb": 2}},
        "load": {"rate": 10, "duration": "1s"},
    }
    with pytest.raises(ValueError, match="SGLang sizes its own as a memory share"):
        JobSpec.model_validate(spec)
    JobSpec.model_validate({**spec, "backends": ["vllm"]})


def test_llamacpps_command_line_says_the_spec_in_its_own_words(tmp_path: Path) -> None:
    argv = LlamaCppBackend(server=OPTIONS).argv(tmp_path / "m.gguf", MODEL, 4321, tmp_path)
    assert argv[0].endswith("llama-server")
    pairs = dict(zip(argv[1::1], argv[2::1], strict=False))
    assert pairs["--model"] == str(tmp_path / "m.gguf") and pairs["--alias"] == "tiny"
    assert (pairs["--port"], pairs["--host"], pairs["--n-gpu-layers"]) == ("4321", "127.0.0.1", "0")
    # max_num_seqs is its slots, each holding the model's context; max_num_batched_tokens its batch.
    assert (pairs["--parallel"], pairs["--kv-unified-per-slot"]) == ("8", "2048")
    assert (pairs["--batch-size"], pairs["--ubatch-size"]) == ("512", "512")
    assert "--no-cache-prompt" in argv and "--metrics" in argv and "--jinja" in argv
    plain = LlamaCppBackend(server=ServerOptions(threads=2)).argv(tmp_path / "m.gguf", MODEL, 1, tmp_path)
    pairs = dict(zip(plain[1::1], plain[2::1], strict=False))
    assert (pairs["--parallel"], pairs["--threads"]) == ("4", "2")
    assert not {"--batch-size", "--cache-prompt", "--no-cache-prompt"} & set(plain)
    assert parse_metrics("llamacpp:prompt_tokens_total 96\nllamacpp:requests_processing 2")["llamacpp:requests_processing"] == 2


def test_llamacpp_refuses_vllms_kv_cache_and_chunking_settings_at_submission() -> None:
    spec = {"name": "j", "model": "tiny:1", "backends": ["llamacpp"], "load": {"rate": 10, "duration": "1s"}}
    for llm, words in (({"kv_cache_gb": 2}, "llama.cpp sizes its own"), ({"chunked_prefill": False}, "always prefills")):
        with pytest.raises(ValueError, match=words):
            JobSpec.model_validate({**spec, "server": {"llm": llm}})
    JobSpec.model_validate({**spec, "server": {"llm": {"max_num_seqs": 2, "prefix_caching": False}}})


def test_triton_openai_gets_a_vllm_backend_repository_and_its_frontends_command_line(tmp_path: Path) -> None:
    backend = TritonOpenAiBackend(server=OPTIONS)
    argv = backend.argv(tmp_path / "model", MODEL, 9100, tmp_path)
    repository = Path(argv[argv.index("--model-repository") + 1])
    engine = json.loads((repository / "tiny" / "1" / "model.json").read_text())
    assert engine == {"model": str(tmp_path / "model"), "served_model_name": "tiny", "dtype": "bfloat16",
                      "disable_log_stats": False, "trust_remote_code": False, "max_model_len": 2048,
                      "max_num_batched_tokens": 512, "max_num_seqs": 8, "enable_prefix_caching": False}  # fmt: skip
    config = (repository / "tiny" / "config.pbtxt").read_text()
    assert 'backend: "vllm"' in config and "REPORT_CUSTOM_METRICS" in config
    assert argv[argv.index("--openai-port") + 1] == "9100" and argv[argv.index("--tokenizer") + 1] == str(tmp_path / "model")
    assert argv[argv.index("--backend") + 1] == "vllm"


SGLANG = """
sglang:num_requests_total{model_name="tiny"} %(n)s
sglang:prompt_tokens_total{model_name="tiny"} %(p)s
sglang:generation_tokens_total{model_name="tiny"} %(g)s
sglang:time_to_first_token_seconds_count{model_name="tiny"} %(n)s
sglang:time_to_first_token_seconds_sum{model_name="tiny"} %(ttft)s
sglang:time_to_first_token_seconds_bucket{le="0.02",model_name="tiny"} %(n)s
sglang:time_to_first_token_seconds_bucket{le="+Inf",model_name="tiny"} %(n)s
sglang:cache_hit_rate{model_name="tiny"} 0.25
sglang:token_usage{model_name="tiny"} 0.5
"""


def test_sglangs_metrics_make_the_same_server_view() -> None:
    before = parse_metrics(SGLANG % {"n": 10, "p": 100, "g": 50, "ttft": 0.1})
    after = parse_metrics(SGLANG % {"n": 30, "p": 400, "g": 250, "ttft": 0.3})
    view = llm_server_delta({"metrics": before}, {"metrics": after})
    assert view is not None and (view.requests, view.prompt_tokens, view.generation_tokens) == (20, 300, 200)
    assert view.ttft_ms_mean == pytest.approx(10.0) and view.quantiles["ttft_p50"].high_ms == 20.0
    assert (view.prefix_cache_hit_share, view.kv_cache_usage) == (0.25, 0.5)


# llama.cpp's /metrics (its build from llama-cpp-python 0.3.36) after the same 300-token prompt was completed twice
# (4 tokens each): the second found 299 of its tokens in the slot's cache (its usage's cached_tokens said 299).
LLAMACPP = """
# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed, excluding cached tokens
llamacpp:prompt_tokens_total %(processed)s
# HELP llamacpp:prompt_tokens_cached_total Number of prompt tokens reused from the cache
llamacpp:prompt_tokens_cached_total %(cached)s
llamacpp:tokens_predicted_total %(predicted)s
llamacpp:n_decode_total 8
llamacpp:requests_processing 0
llamacpp:requests_deferred 0
"""


def test_llamacpps_metrics_give_its_prompt_tokens_and_prefix_cache_hits_but_no_request_count() -> None:
    before = parse_metrics(LLAMACPP % {"processed": 0, "cached": 0, "predicted": 0})
    after = parse_metrics(LLAMACPP % {"processed": 301, "cached": 299, "predicted": 8})
    view = llm_server_delta({"metrics": before}, {"metrics": after})
    # every prompt token, computed or found in the cache; the share found; no requests counted (it counts none)
    assert view is not None and (view.requests, view.prompt_tokens, view.generation_tokens) == (None, 600, 8)
    assert view.prefix_cache_hit_share == 299 / 600 and view.kv_cache_usage is None
    idle = llm_server_delta({"metrics": after}, {"metrics": after})
    assert idle is not None and idle.prompt_tokens == 0 and idle.prefix_cache_hit_share is None


def test_llamacpp_offers_its_slots_cache_erase_when_a_reset_is_asked(tmp_path: Path) -> None:
    reset = LlamaCppBackend(server=ServerOptions(llm=LlmServerOptions(reset_prefix_cache=True)))
    argv = reset.argv(tmp_path / "m.gguf", MODEL, 1, tmp_path)
    assert "--slots" in argv and argv[argv.index("--slot-save-path") + 1] == str(tmp_path / "llamacpp-slots")
    assert "--slot-save-path" not in LlamaCppBackend(server=OPTIONS).argv(tmp_path / "m.gguf", MODEL, 1, tmp_path)


def test_llamacpp_serves_embeddings_when_started_as_a_pooling_model(tmp_path: Path) -> None:
    pooled = ServerOptions(llm=LlmServerOptions(runner="pooling"))
    argv = LlamaCppBackend(server=pooled).argv(tmp_path / "m.gguf", MODEL, 1, tmp_path)
    assert "--embeddings" in argv and argv[argv.index("--pooling") + 1] == "last"
    assert "--embeddings" not in LlamaCppBackend(server=OPTIONS).argv(tmp_path / "m.gguf", MODEL, 1, tmp_path)


@pytest.mark.parametrize("name", ["sglang", "triton-openai"])
def test_a_server_not_installed_here_says_why_and_is_not_offered(name: str) -> None:
    ok, why = BACKENDS[name].available()
    if ok:
        pytest.skip(f"{name} is installed on this host ({why}): its absence cannot be checked here")
    usable, missing = available_backends([name])
    assert usable == [] and missing[name] == why and ("environment" in why or "frontend" in why)


def test_a_language_model_server_gets_longer_to_get_ready_unless_the_follower_says() -> None:
    from follower.point.context import LLM_READY_TIMEOUT_S, READY_TIMEOUT_S, ServerRun

    tensor = MODEL.model_copy(update={"format": "onnx", "llm": None})
    assert ServerRun(model=MODEL, model_path=Path("m"), workdir=Path("w")).ready_limit_s == LLM_READY_TIMEOUT_S == 600
    assert ServerRun(model=tensor, model_path=Path("m"), workdir=Path("w")).ready_limit_s == READY_TIMEOUT_S == 120
    # BENCHFLEET_FOLLOWER_SERVER_READY_TIMEOUT_S, for every server of that follower
    assert ServerRun(model=MODEL, model_path=Path("m"), workdir=Path("w"), ready_timeout_s=45).ready_limit_s == 45


@pytest.mark.parametrize(("dies", "repack"), [(True, False), (False, True)])
def test_quantised_models_run_without_repacking_where_the_probe_dies_of_an_illegal_instruction(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, dies: bool, repack: bool
) -> None:
    """The probe starts the program on the quantised model: one that dies of SIGILL (the repacked kernels on a CPU that
    says it has AMX and dies on it) turns repacking off for quantised types on the CPU, stated in the version; one
    that exits otherwise leaves it on (its own start fails as it would have). Float types and GPU servers never probe."""
    import signal
    import stat

    from follower.backends import llamacpp

    program = tmp_path / f"llama-server-{dies}"
    ends = f"os.kill(os.getpid(), {int(signal.SIGILL)})" if dies else "sys.exit(1)"
    program.write_text(f"#!{sys.executable}\nimport os, sys\nif '--version' in sys.argv: print('version: 1 (x)')\nelse: {ends}\n")
    program.chmod(program.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv(LlamaCppBackend.python_setting, str(program))
    monkeypatch.setattr(llamacpp, "convert", lambda model_dir, out, *, dtype: out)  # the converter is test_to_gguf's
    monkeypatch.setattr(llamacpp, "_REPACK_DIES", {})
    float16 = LlamaCppBackend(server=ServerOptions(llm=LlmServerOptions(dtype="float16")))
    float16.prepare(tmp_path, MODEL, tmp_path)
    assert llamacpp._REPACK_DIES == {}  # nothing probed for a float type
    q4 = LlamaCppBackend(server=ServerOptions(llm=LlmServerOptions(dtype="q4_0")))
    q4.prepare(tmp_path, MODEL, tmp_path)
    assert {str(program): dies} == llamacpp._REPACK_DIES
    argv = q4.argv(tmp_path / "m.gguf", MODEL, 1, tmp_path)
    assert ("--no-repack" not in argv) is repack and ("weight repacking off" not in q4.version()) is repack
    assert "--no-repack" not in float16.argv(tmp_path / "m.gguf", MODEL, 1, tmp_path)
