"""Images in chat messages (`llm.images`) against a strict stand-in of a vision model's chat completions API
(vision_standin.py, written from OpenAI's documented content parts): every request's parts pass its schema, every
image is a PNG of the declared size and no two requests send the same one, and the stand-in's count of each prompt
(its text, and its images as 14-pixel patches) differs from the text built by one constant: the point keeps it as its
prompt_rendering_tokens and no request disagrees."""

from __future__ import annotations

import io
import math
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import orjson
import pytest

from benchfleet.generate.llmgen import LlamaSpec, generate
from common.formats import hfbundle
from common.procs import SupervisedProcess, free_port, http_ready
from common.spec.llm import ImageInputs, LlmWorkload
from follower.loadgen.llmprompts import PromptMaker, llm_bodies
from follower.loadgen.llmstats import llm_figures
from follower.loadgen.openloop import drive
from follower.protocols import Endpoint

pytestmark = pytest.mark.integration

SERVER = Path(__file__).with_name("vision_standin.py")


@pytest.fixture(scope="module")
def origin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    port = free_port()
    argv = [sys.executable, str(SERVER), "--port", str(port)]
    with SupervisedProcess(argv, name="vision stand-in", log_path=tmp_path_factory.mktemp("vision") / "log") as proc:
        proc.wait_ready(http_ready(f"http://127.0.0.1:{port}/v1/models"), timeout_s=30)
        yield f"http://127.0.0.1:{port}"


def test_images_in_chat_messages_pass_the_apis_schema_and_count_as_one_constant(origin: str) -> None:
    data, _ = generate(LlamaSpec(layers=1, hidden=64, heads=2, kv_heads=2, intermediate=128, vocab=2048, context=512))
    maker = PromptMaker(*hfbundle.tokenizer_files(io.BytesIO(data), limit_bytes=10**8))
    images = ImageInputs(count=2, width=28, height=42)
    workload = LlmWorkload(api="chat", prompt_tokens=40, output_tokens=4, images=images)
    n = 12
    bodies, index, held, asked = llm_bodies(workload, "vision", maker, n, seed=3)
    offsets = np.arange(n, dtype=np.int64) * 20_000_000
    endpoint = Endpoint("openai", f"{origin}/v1/chat/completions", "vision")
    records = drive(endpoint, bodies, offsets, body_index=index, max_concurrency=16, timeout_s=30, drain_s=10)
    assert records.ok.all(), records.error_sample
    seen = httpx.get(f"{origin}/seen").json()
    assert len(seen) == n and all(len(request) == images.count for request in seen)
    assert all((image["width"], image["height"]) == (28, 42) for request in seen for image in request)
    assert len({image["sha256"] for request in seen for image in request}) == n * images.count  # each its own
    # The stand-in's count: the text's words plus one, and 2 x 3 patches per image; ours: the text by the template.
    texts = [orjson.loads(b)["messages"][-1]["content"][0]["text"] for b in bodies]
    patches = images.count * math.ceil(28 / 14) * math.ceil(42 / 14)
    offset = {len(text.split()) + 1 + patches - int(h) for text, h in zip(texts, held, strict=True)}
    assert len(offset) == 1
    judged = llm_figures(records, 0.24, (held, asked), workload, None, maker)
    assert judged is not None
    assert judged.figures.mismatched_requests == 0 and judged.figures.prompt_rendering_tokens == offset.pop()
    assert judged.figures.output_tokens_server == 4 * n


def test_a_part_the_api_does_not_define_is_refused_naming_it(origin: str) -> None:
    body = {
        "model": "vision",
        "max_tokens": 2,
        "stream": True,
        "messages": [{"role": "user", "content": [{"type": "image", "url": "data:image/png;base64,AAAA"}]}],
    }
    answer = httpx.post(f"{origin}/v1/chat/completions", json=body)
    assert answer.status_code == 400 and "messages[0].content[0]" in answer.json()["error"]["message"]


@pytest.fixture(scope="module")
def reranker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    port = free_port()
    argv = [sys.executable, str(SERVER.with_name("rerank_standin.py")), "--port", str(port)]
    with SupervisedProcess(argv, name="rerank stand-in", log_path=tmp_path_factory.mktemp("rerank") / "log") as proc:
        proc.wait_ready(http_ready(f"http://127.0.0.1:{port}/v1/models"), timeout_s=30)
        yield f"http://127.0.0.1:{port}"


def test_a_rerank_point_scores_its_documents_and_counts_them_per_second(reranker: str) -> None:
    """llm.api rerank against a strict stand-in of the rerank schema Cohere, Jina and vLLM share: every request (a
    query and 5 documents of exact lengths) passes it and is answered whole; items per second are the documents."""
    data, _ = generate(LlamaSpec(layers=1, hidden=64, heads=2, kv_heads=2, intermediate=128, vocab=2048, context=512))
    maker = PromptMaker(*hfbundle.tokenizer_files(io.BytesIO(data), limit_bytes=10**8))
    workload = LlmWorkload(api="rerank", prompt_tokens=24, inputs_per_request=5)
    n = 10
    bodies, index, held, asked = llm_bodies(workload, "reranker", maker, n, seed=2)
    docs = [orjson.loads(b) for b in bodies]
    assert all(len(d["documents"]) == 5 and d["top_n"] == 5 for d in docs) and held.tolist() == [6 * 24] * n
    endpoint = Endpoint("cohere-rerank", reranker, "reranker")
    records = drive(
        endpoint, bodies, np.arange(n, dtype=np.int64) * 10_000_000, body_index=index, max_concurrency=8, timeout_s=30, drain_s=10
    )
    assert records.ok.all(), records.error_sample
    assert httpx.get(f"{reranker}/seen").json() == [5] * n
    judged = llm_figures(records, 0.5, (held, asked), workload, None, maker)
    assert judged is not None and judged.figures.items_per_s == pytest.approx(5 * n / 0.5)
    assert judged.figures.mismatched_requests == 0 and judged.figures.ttft_ms is None
    refused = httpx.post(f"{reranker}/v1/rerank", json={"model": "r", "query": "q", "documents": ["a"], "rank": 1})
    assert refused.status_code == 400 and "rank" in refused.json()["error"]["message"]
