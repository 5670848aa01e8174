"""The bodies each LLM API is sent, where each is routed, and what a job may ask of them."""

from __future__ import annotations

import io

import orjson
import pytest
import yaml
from pydantic import ValidationError

from benchfleet.generate.llmgen import LlamaSpec, generate
from common.formats import hfbundle
from common.spec.job import JobSpec
from common.spec.llm import LlmWorkload
from follower.loadgen.llmprompts import PromptMaker, llm_bodies, request_body
from follower.protocols import Credentials, Endpoint, protocol_of


def test_each_api_gets_its_own_body() -> None:
    messages = [("system", "Be brief."), ("user", "Why?")]
    anthropic = orjson.loads(request_body(LlmWorkload(api="messages", ignore_eos=False), "m", messages, 8))
    assert anthropic == {
        "model": "m",
        "max_tokens": 8,
        "stream": True,
        "system": "Be brief.",
        "messages": [{"role": "user", "content": "Why?"}],
    }
    responses = orjson.loads(request_body(LlmWorkload(api="responses"), "m", messages, 8))
    assert responses == {
        "model": "m",
        "max_output_tokens": 8,
        "stream": True,
        "store": False,
        "ignore_eos": True,
        "input": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Why?"}],
    }
    chat = orjson.loads(request_body(LlmWorkload(api="chat"), "m", "Why?", 8))
    assert chat["messages"] == [{"role": "user", "content": "Why?"}] and chat["min_tokens"] == 8


def test_a_templated_apis_prompts_are_counted_with_the_chat_template() -> None:
    data, _ = generate(LlamaSpec(layers=1, hidden=64, heads=2, kv_heads=2, intermediate=128, vocab=2048, context=512))
    maker = PromptMaker(*hfbundle.tokenizer_files(io.BytesIO(data), limit_bytes=10**8))
    for api in ("responses", "messages"):
        workload = LlmWorkload(api=api, prompt_tokens=40, output_tokens=4, ignore_eos=api != "messages")  # type: ignore[arg-type]
        bodies, _, held, _ = llm_bodies(workload, "m", maker, 5, seed=1)
        docs = [orjson.loads(b) for b in bodies]
        listed = [d.get("input") or d["messages"] for d in docs]
        assert [maker.count_chat([(m["role"], m["content"]) for m in x]) for x in listed] == held.tolist() == [40] * 5


def test_an_openai_compatible_server_routes_each_api_at_its_origin() -> None:
    server = Endpoint("openai", "http://127.0.0.1:8000", "m")
    openai = protocol_of(server)
    routed = {
        api: openai.route(server, LlmWorkload(api=api, ignore_eos=api != "messages"))
        for api in ("completions", "chat", "messages", "responses")
    }  # type: ignore[arg-type]
    assert {api: (e.protocol, protocol_of(e).infer_url(e)) for api, e in routed.items()} == {
        "completions": ("openai", "http://127.0.0.1:8000/v1/completions"),
        "chat": ("openai", "http://127.0.0.1:8000/v1/chat/completions"),
        "messages": ("anthropic", "http://127.0.0.1:8000/v1/messages"),
        "responses": ("openai-responses", "http://127.0.0.1:8000/v1/responses"),
    }
    # Anthropic's version header goes with every request, unless the target's secret sets its own.
    anthropic = routed["messages"]
    with_version = protocol_of(anthropic).with_headers
    assert with_version(Credentials(headers=(("x-api-key", "k"),))).headers == (
        ("x-api-key", "k"),
        ("anthropic-version", "2023-06-01"),
    )
    assert with_version(Credentials(headers=(("Anthropic-Version", "2024-01-01"),))).headers == (
        ("Anthropic-Version", "2024-01-01"),
    )
    # and the transport a Messages point opens carries it
    transport = protocol_of(anthropic).open_transport(anthropic, max_concurrency=1, timeout_s=1)
    assert "anthropic-version: 2023-06-01\r\n" in transport.session.extra_head  # type: ignore[attr-defined]


def _job(protocol: str, llm: str) -> JobSpec:
    return JobSpec.model_validate(
        yaml.safe_load(f"""
name: apis
model: tiny-llama:1
target: {{url: "http://10.0.0.1:8000", protocol: {protocol}}}
load: {{pattern: poisson, rate: 50, duration: 20s}}
llm: {llm}
""")
    )


@pytest.mark.parametrize(
    ("protocol", "llm", "message"),
    [
        ("anthropic", "{api: chat}", "protocol anthropic speaks llm.api messages, not chat"),
        ("openai-responses", "{api: messages, ignore_eos: false}", "protocol openai-responses speaks llm.api responses"),
        ("openai", "{api: messages}", "Anthropic's Messages API cannot be asked for an exact length"),
        ("kserve-http", "{api: chat}", "it needs protocol openai or anthropic or openai-responses"),
    ],
)
def test_a_target_speaks_only_its_apis(protocol: str, llm: str, message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        _job(protocol, llm)
    assert _job("anthropic", "{api: messages, ignore_eos: false}").target is not None
    assert _job("openai", "{api: responses}").llm is not None


def test_images_go_in_each_apis_own_content_parts_as_valid_pngs() -> None:
    import base64

    import numpy as np
    from PIL import Image

    from follower.loadgen.llmimages import png

    picture = png(30, 20, np.random.default_rng(0))
    with Image.open(io.BytesIO(picture)) as opened:
        assert (opened.format, opened.size, opened.mode) == ("PNG", (30, 20), "RGB")
        opened.load()  # every row decodes
    encoded = base64.b64encode(picture).decode()
    chat = orjson.loads(request_body(LlmWorkload(api="chat"), "m", "Look.", 4, [picture]))
    assert chat["messages"][0]["content"] == [
        {"type": "text", "text": "Look."},
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{encoded}"}},
    ]
    responses = orjson.loads(request_body(LlmWorkload(api="responses"), "m", "Look.", 4, [picture]))
    assert responses["input"][0]["content"] == [
        {"type": "input_text", "text": "Look."},
        {"type": "input_image", "image_url": f"data:image/png;base64,{encoded}"},
    ]
    messages = orjson.loads(
        request_body(LlmWorkload(api="messages", ignore_eos=False), "m", [("system", "S"), ("user", "Look.")], 4, [picture])
    )
    assert messages["system"] == "S" and messages["messages"][0]["content"] == [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": encoded}},
        {"type": "text", "text": "Look."},
    ]
    with pytest.raises(ValidationError, match="images go in a chat message"):
        LlmWorkload(api="completions", images={"count": 1})  # type: ignore[arg-type]
