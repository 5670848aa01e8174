"""The model repository: upload, list, get, download with checksum, delete, duplicates and invalid files."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

from common.wire.auth import DEFAULT_TEAM
from tests.integration.leader.conftest import ADMIN, Leader
from tests.unit.leader.onnx_models import identity_model, linear_model


def test_upload_list_get_download_delete(leader: Leader) -> None:
    data = linear_model()
    meta = leader.upload_model("linear", "1.0", data)
    assert meta["sha256"] == hashlib.sha256(data).hexdigest()
    assert meta["size_bytes"] == len(data)
    assert meta["format"] == "onnx"
    assert meta["inputs"] == [{"name": "input", "datatype": "FP32", "shape": [-1, 3]}]
    assert meta["outputs"] == [{"name": "logits", "datatype": "FP32", "shape": [-1, 2]}]

    leader.upload_model("linear", "2.0", identity_model())
    listed = leader.client.get("/api/v1/models", headers=ADMIN).json()
    assert [(m["name"], m["version"]) for m in listed] == [("linear", "2.0"), ("linear", "1.0")]
    assert leader.client.get("/api/v1/models/linear/1.0", headers=ADMIN).json() == meta
    assert leader.client.get("/api/v1/models/linear/latest", headers=ADMIN).json()["version"] == "2.0"

    # Followers download models with their own token.
    download = leader.client.get("/api/v1/models/linear/1.0/file", headers=ADMIN)
    assert download.status_code == 200
    assert download.content == data
    assert download.headers["X-Benchfleet-Sha256"] == hashlib.sha256(download.content).hexdigest()

    assert leader.client.delete("/api/v1/models/linear/1.0", headers=ADMIN).status_code == 204
    assert leader.client.get("/api/v1/models/linear/1.0", headers=ADMIN).status_code == 404
    assert leader.client.get("/api/v1/models/linear/1.0/file", headers=ADMIN).status_code == 404
    assert leader.client.delete("/api/v1/models/linear/1.0", headers=ADMIN).status_code == 404
    # The GridFS file went with it: only version 2.0's file is left.
    assert leader.db["models.files"].count_documents({}) == 1


def test_duplicate_is_409_and_keeps_the_first(leader: Leader) -> None:
    first = leader.upload_model("m", "1")
    response = leader.client.post(
        "/api/v1/models", headers=ADMIN, data={"name": "m", "version": "1"}, files={"file": ("m.onnx", linear_model())}
    )
    assert response.status_code == 409
    assert response.json()["error"] == "conflict"
    assert leader.client.get("/api/v1/models/m/1", headers=ADMIN).json()["sha256"] == first["sha256"]
    assert leader.db["models.files"].count_documents({}) == 1


def test_invalid_uploads_store_nothing(leader: Leader) -> None:
    cases = [
        ({"name": "m", "version": "1"}, b"not an onnx model", 422, "file"),
        ({"name": "bad name!", "version": "1"}, identity_model(), 422, "name"),
        ({"name": "m", "version": "../1"}, identity_model(), 422, "version"),
        # A trailing newline once passed the name check (re.match's $ matches before it) and failed later as a 500.
        ({"name": "m\n", "version": "1"}, identity_model(), 422, "name"),
        ({"name": "m", "version": "1\n"}, identity_model(), 422, "version"),
        ({"version": "1"}, identity_model(), 422, "name"),
        ({"name": "m", "version": "1", "format": "tensorflow"}, identity_model(), 422, "format"),
    ]
    for data, content, status, field in cases:
        response = leader.client.post("/api/v1/models", headers=ADMIN, data=data, files={"file": ("m.onnx", content)})
        assert response.status_code == status, (data, response.text)
        assert response.json()["field"] == field, (data, response.json())
    no_file = leader.client.post(
        "/api/v1/models", headers=ADMIN, data={"name": "m", "version": "1"}, files={"other": ("x", b"x")}
    )
    assert no_file.status_code == 422 and no_file.json()["field"] == "file"
    as_json = leader.client.post("/api/v1/models", headers=ADMIN, json={"name": "m"})
    assert as_json.status_code == 415
    assert leader.db.models.count_documents({}) == 0
    assert leader.db["models.files"].count_documents({}) == 0


def test_upload_limit_is_413(make_leader: Callable[..., Leader]) -> None:
    leader = make_leader(max_upload_bytes=1024)
    big = identity_model() + b"\x00" * 2048
    response = leader.client.post(
        "/api/v1/models", headers=ADMIN, data={"name": "m", "version": "1"}, files={"file": ("m.onnx", big)}
    )
    assert response.status_code == 413
    assert leader.db.models.count_documents({}) == 0


def test_model_in_use_cannot_be_deleted(leader: Leader) -> None:
    leader.upload_model("ident", "1")
    job = leader.submit("ident:1")
    assert leader.client.delete("/api/v1/models/ident/1", headers=ADMIN).status_code == 409
    leader.client.post(f"/api/v1/jobs/{job['id']}/cancel", headers=ADMIN)
    assert leader.client.delete("/api/v1/models/ident/1", headers=ADMIN).status_code == 204


def test_a_language_model_directory_is_stored_described_and_checked(leader: Leader) -> None:
    """An "hf" upload (the canonical LLM) is described from its config and weight headers; one carrying code is a 422
    naming the file, and nothing of it is stored."""
    import io
    import zipfile

    from benchfleet.generate.llmgen import LlamaSpec, generate

    data, generated = generate(LlamaSpec(layers=2, hidden=64, heads=2, kv_heads=2, intermediate=128, vocab=1024, context=512))

    def upload(name: str, content: bytes) -> Any:
        return leader.client.post("/api/v1/models", headers=ADMIN, data={"name": name, "version": "1", "format": "hf"},
                                  files={"file": ("model.zip", content, "application/zip")})  # fmt: skip

    response = upload("tiny-llama", data)
    assert response.status_code == 201, response.text
    meta = response.json()
    assert meta["format"] == "hf" and meta["inputs"] == [] and meta["sha256"] == hashlib.sha256(data).hexdigest()
    assert meta["llm"] == {"architecture": "LlamaForCausalLM", "model_type": "llama", "parameters": generated["parameters"],
                           "context_length": 512, "vocab_size": generated["vocab_size"], "layers": 2, "hidden": 64,
                           "dtype": "float16", "chat_template": True}  # fmt: skip
    assert leader.client.get("/api/v1/models/tiny-llama/1/file", headers=ADMIN).content == data
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as src, zipfile.ZipFile(out, "w") as dst:
        for info in src.infolist():
            dst.writestr(info, src.read(info))
        dst.writestr("modeling_llama.py", "import os; os.system('id')")
    refused = upload("evil-llama", out.getvalue())
    assert refused.status_code == 422 and refused.json()["field"] == "file", refused.text
    assert "code and pickled weights" in refused.json()["message"]
    assert leader.client.get("/api/v1/models/evil-llama/1", headers=ADMIN).status_code == 404


def test_a_language_model_needs_an_llm_server_and_a_tensor_model_a_tensor_server(leader: Leader) -> None:
    from benchfleet.generate.llmgen import LlamaSpec, generate

    data, _ = generate(LlamaSpec(layers=1, hidden=64, heads=2, kv_heads=2, intermediate=128, vocab=1024, context=256))
    stored = leader.client.post("/api/v1/models", headers=ADMIN, data={"name": "lm", "version": "1", "format": "hf"},
                                files={"file": ("lm.zip", data, "application/zip")})  # fmt: skip
    assert stored.status_code == 201, stored.text
    leader.upload_model("ident", "1")
    yaml = {"Content-Type": "application/yaml"}
    for model, backends, named in (("lm:1", "[onnxruntime, vllm]", "onnxruntime"), ("ident:1", "[vllm]", "vllm")):
        spec = f"name: j\nmodel: {model}\nbackends: {backends}\nload: {{allow_short: true, rate: 10, duration: 1s}}\n"
        refused = leader.client.post("/api/v1/jobs", headers={**ADMIN, **yaml}, content=spec)
        assert refused.status_code == 422 and refused.json()["field"] == "backends", refused.text
        assert refused.json()["message"].startswith(f"{named} cannot serve {model}")
    # What the server would refuse request by request is refused at submission: a chat API on a model with no chat
    # template (this one has one: the generator writes it), and lengths past what a sequence may hold.
    assert stored.json()["llm"]["chat_template"] is True
    base = "name: j\nmodel: lm:1\nbackends: [vllm]\nload: {allow_short: true, rate: 10, duration: 1s}\n"
    for extra, field in (("llm: {prompt_tokens: 200, output_tokens: 100}\n", "llm"),
                         ("llm: {output_tokens: 8}\nserver: {llm: {max_model_len: 64}}\n", "llm")):  # fmt: skip
        refused = leader.client.post("/api/v1/jobs", headers={**ADMIN, **yaml}, content=base + extra)
        assert refused.status_code == 422 and refused.json()["field"] == field, refused.text
        assert "may hold on the server" in refused.json()["message"]
    fits = leader.client.post("/api/v1/jobs", headers={**ADMIN, **yaml},
                              content=base + "llm: {prompt_tokens: 32, output_tokens: 16}\n")  # fmt: skip
    assert fits.status_code == 201, fits.text


def test_a_chat_workload_needs_a_chat_template(leader: Leader) -> None:
    import io
    import json
    import zipfile

    from benchfleet.generate.llmgen import LlamaSpec, generate

    data, _ = generate(LlamaSpec(layers=1, hidden=64, heads=2, kv_heads=2, intermediate=128, vocab=1024, context=256))
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as src, zipfile.ZipFile(out, "w") as dst:
        for info in src.infolist():
            content = src.read(info)
            if info.filename == "tokenizer_config.json":
                content = json.dumps({k: v for k, v in json.loads(content).items() if k != "chat_template"}).encode()
            dst.writestr(info, content)
    stored = leader.client.post("/api/v1/models", headers=ADMIN, data={"name": "plain", "version": "1", "format": "hf"},
                                files={"file": ("plain.zip", out.getvalue(), "application/zip")})  # fmt: skip
    assert stored.status_code == 201 and stored.json()["llm"]["chat_template"] is False, stored.text
    spec = "name: j\nmodel: plain:1\nbackends: [vllm]\nload: {allow_short: true, rate: 10, duration: 1s}\n"
    spec += "llm: {api: chat, prompt_tokens: 16}\n"
    refused = leader.client.post("/api/v1/jobs", headers={**ADMIN, "Content-Type": "application/yaml"}, content=spec)
    assert refused.status_code == 422 and refused.json()["field"] == "llm.api", refused.text


def test_an_api_a_started_server_does_not_serve_is_refused_naming_it(leader: Leader) -> None:
    """vLLM serves the Messages, Responses, embeddings and rerank APIs beside completions and chat, llama.cpp the
    Responses and embeddings APIs, the other servers benchfleet starts those two: a job asking a server for another is
    refused at submission, naming llm.api and what that server serves."""
    from benchfleet.generate.llmgen import LlamaSpec, generate

    data, _ = generate(LlamaSpec(layers=1, hidden=64, heads=2, kv_heads=2, intermediate=128, vocab=1024, context=256))
    stored = leader.client.post("/api/v1/models", headers=ADMIN, data={"name": "apis", "version": "1", "format": "hf"},
                                files={"file": ("apis.zip", data, "application/zip")})
    assert stored.status_code == 201, stored.text
    yaml = {**ADMIN, "Content-Type": "application/yaml"}
    load = "name: j\nmodel: apis:1\nload: {allow_short: true, rate: 10, duration: 1s}\n"
    base = load + "llm: {api: messages, ignore_eos: false, prompt_tokens: 16}\n"
    refused = leader.client.post("/api/v1/jobs", headers=yaml, content=base + "backends: [vllm, llamacpp]\n")
    assert refused.status_code == 422 and refused.json()["field"] == "llm.api", refused.text
    assert refused.json()["message"] == (
        "backend llamacpp does not serve api messages (llamacpp serves completions, chat, responses, embeddings)"
    )
    assert leader.client.post("/api/v1/jobs", headers=yaml, content=base + "backends: [vllm]\n").status_code == 201
    responses = load + "llm: {api: responses, prompt_tokens: 16}\nbackends: [vllm, llamacpp]\n"
    assert leader.client.post("/api/v1/jobs", headers=yaml, content=responses).status_code == 201


def test_rerank_is_asked_of_a_reranker_and_a_reranker_is_asked_only_to_rerank(leader: Leader) -> None:
    """A sequence classifier (the canonical LLM with a score head) scores texts and does nothing else; a causal LM
    cannot score: either asked of the other is refused at submission, naming llm.api."""
    from benchfleet.generate.llmgen import LlamaSpec, generate

    yaml = {**ADMIN, "Content-Type": "application/yaml"}
    for name, head in (("gen", "lm"), ("ranker", "score")):
        spec = LlamaSpec(layers=1, hidden=64, heads=2, kv_heads=2, intermediate=128, vocab=1024, context=256, head=head)
        data, _ = generate(spec)
        form, files = {"name": name, "version": "1", "format": "hf"}, {"file": (f"{name}.zip", data, "application/zip")}
        stored = leader.client.post("/api/v1/models", headers=ADMIN, data=form, files=files)
        assert stored.status_code == 201, stored.text
    assert stored.json()["llm"]["architecture"] == "LlamaForSequenceClassification"
    load = "backends: [vllm]\nload: {allow_short: true, rate: 10, duration: 1s}\n"
    for model, api, said in (
        ("gen", "rerank", "api rerank needs a reranker (a sequence classifier); model gen:1 is a LlamaForCausalLM"),
        ("ranker", "embeddings", "api embeddings needs a model that generates or embeds; model ranker:1 is a Llama"),
    ):
        spec = f"name: j\nmodel: {model}:1\n{load}llm: {{api: {api}, prompt_tokens: 16}}\n"
        refused = leader.client.post("/api/v1/jobs", headers=yaml, content=spec)
        assert refused.status_code == 422 and refused.json()["field"] == "llm.api", refused.text
        assert refused.json()["message"].startswith(said), refused.text
    spec = f"name: j\nmodel: ranker:1\n{load}llm: {{api: rerank, prompt_tokens: 16, inputs_per_request: 4}}\n"
    assert leader.client.post("/api/v1/jobs", headers=yaml, content=spec).status_code == 201
    # A target serves what it serves: its stored model only gives the client its tokenizer.
    allowed = leader.client.put(f"/api/v1/teams/{DEFAULT_TEAM}", headers=ADMIN, json={"egress_allow": ["127.0.0.1"]})
    assert allowed.status_code == 200, allowed.text
    target = "target: {url: 'http://127.0.0.1:9', protocol: cohere-rerank}\nload: {allow_short: true, rate: 10, duration: 1s}\n"
    spec = f"name: j\nmodel: gen:1\n{target}llm: {{api: rerank, prompt_tokens: 16}}\n"
    assert leader.client.post("/api/v1/jobs", headers=yaml, content=spec).status_code == 201


def test_a_prompt_set_is_uploaded_checked_and_named_by_a_language_models_job(leader: Leader) -> None:
    import json

    from benchfleet.generate.llmgen import LlamaSpec, generate

    data, _ = generate(LlamaSpec(layers=1, hidden=64, heads=2, kv_heads=2, intermediate=128, vocab=1024, context=256))
    assert leader.client.post("/api/v1/models", headers=ADMIN, data={"name": "lm", "version": "1", "format": "hf"},
                              files={"file": ("lm.zip", data, "application/zip")}).status_code == 201  # fmt: skip

    def upload(name: str, lines: list[object], fmt: str = "prompts") -> dict:  # type: ignore[type-arg]
        content = "".join(json.dumps(line) + "\n" for line in lines).encode()
        response = leader.client.post("/api/v1/data", headers=ADMIN, data={"name": name, "format": fmt},
                                      files={"file": ("p.jsonl", content, "application/jsonl")})  # fmt: skip
        return {"status": response.status_code, **response.json()}

    chats = upload("chats", [{"conversation": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo"},
                                               {"role": "user", "content": "Why?"}]}, {"prompt": "Once"}])  # fmt: skip
    assert (chats["status"], chats["samples"], chats["fields"]) == (201, 3, ["messages", "prompt"]), chats
    lengths = upload("lengths", [{"prompt_tokens": 12, "output_tokens": 4}, {"prompt_tokens": 40}])
    assert lengths["status"] == 201 and lengths["fields"] == ["prompt_tokens"]
    bad = upload("bad", [{"prompt": "ok"}, {"messages": "not a list"}])
    assert bad["status"] == 422 and bad["field"] == "file" and "line 2: messages must be a list" in bad["message"], bad
    request_data = upload("tensors", [{"x": [1.0]}], fmt="jsonl")

    yaml = {**ADMIN, "Content-Type": "application/yaml"}
    base = "name: j\nmodel: lm:1\nbackends: [vllm]\nload: {allow_short: true, rate: 10, duration: 1s}\n"
    for extra, field, needle in (
        (f"llm: {{dataset: {chats['id']}}}\n", "llm.dataset", "holds messages rows, which api completions cannot send"),
        (f"llm: {{dataset: {request_data['id']}}}\n", "llm.dataset", "is jsonl data, not a prompt set"),
        ("llm: {dataset: nosuch}\n", "llm.dataset", "does not exist"),
        (f"data: {{source: upload, id: {lengths['id']}}}\n", "data.id", "name it in llm.dataset"),
        ("llm: {prompt_tokens: 100, shared_prefix: {tokens: 150}}\n", "llm", "may hold on the server"),
        (f"llm: {{dataset: {lengths['id']}}}\nquality: {{evaluation: {{}}}}\n", "quality.evaluation", "has no answers to score"),
    ):  # fmt: skip
        refused = leader.client.post("/api/v1/jobs", headers=yaml, content=base + extra)
        assert refused.status_code == 422 and refused.json()["field"] == field, refused.text
        assert needle in refused.json()["message"], refused.text
    for extra in (f"llm: {{api: chat, dataset: {chats['id']}, order: sequential}}\n",
                  f"llm: {{dataset: {lengths['id']}, shared_prefix: {{tokens: 16, share: 0.5}}}}\n"):  # fmt: skip
        accepted = leader.client.post("/api/v1/jobs", headers=yaml, content=base + extra)
        assert accepted.status_code == 201, accepted.text
    # An evaluation set: an answer on every row, listed as such; a job scores it by its scorer.
    answered = upload("eval", [{"prompt": "2+2=", "answer": 4}, {"prompt": "Capital of France?", "answer": "Paris"}])
    assert answered["status"] == 201 and answered["fields"] == ["prompt", "answer"], answered
    half = upload("half", [{"prompt": "2+2=", "answer": 4}, {"prompt": "Why?"}])
    assert half["status"] == 422 and "line 2: has no answer, while other rows have one" in half["message"], half
    scored = f"llm: {{dataset: {answered['id']}}}\nquality: {{evaluation: {{scorer: number}}, agreement: true}}\n"
    accepted = leader.client.post("/api/v1/jobs", headers=yaml, content=base + scored)
    assert accepted.status_code == 201, accepted.text
    quality = accepted.json()["spec"]["quality"]
    assert (quality["accuracy"], quality["evaluation"], quality["agreement"]) == (None, {"scorer": "number"}, True)


def test_only_an_admin_marks_a_model_trusted_and_unfinished_jobs_take_the_mark(leader: Leader) -> None:
    leader.upload_model("ident", "1")
    assert leader.client.get("/api/v1/models/ident/1", headers=ADMIN).json()["trusted"] is False
    job = leader.submit("ident:1")
    made = leader.client.post("/api/v1/tokens", headers=ADMIN, json={"user": "sue", "role": "submitter"})
    submitter = {"Authorization": f"Bearer {made.json()['token']}"}

    refused = leader.client.patch("/api/v1/models/ident/1", headers=submitter, json={"trusted": True})
    assert refused.status_code == 403
    bad = leader.client.patch("/api/v1/models/ident/1", headers=ADMIN, json={"trusted": "yes"})
    assert bad.status_code == 422 and "trusted" in bad.text
    missing = leader.client.patch("/api/v1/models/ident/9", headers=ADMIN, json={"trusted": True})
    assert missing.status_code == 404 and missing.json()["field"] == "version"

    marked = leader.client.patch("/api/v1/models/ident/1", headers=ADMIN, json={"trusted": True})
    assert marked.status_code == 200 and marked.json()["trusted"] is True
    assert leader.client.get("/api/v1/models/ident/1", headers=ADMIN).json()["trusted"] is True
    # The queued job's copy of the model (what its follower receives) carries the mark too.
    assert leader.db["jobs"].find_one({"_id": job["id"]})["model"]["trusted"] is True


def test_a_model_declaring_a_request_too_big_to_build_is_refused_and_a_batch_past_the_bound_too(leader: Leader) -> None:
    """The attack's model: a few bytes of ONNX declaring an input of [-1, 30000000] made a follower build sixteen bodies
    of 30 M values and die, at every attempt. Refused at upload (ONNX read here, or a declared signature), naming the
    tensor; a model within the bound whose job's batch would take a request past it is refused at submission, naming
    batch_sizes and the batch sizes that fit."""
    bomb = identity_model(dims=("batch", 30_000_000))
    assert len(bomb) < 200
    form = {"name": "bomb", "version": "1"}
    refused = leader.client.post("/api/v1/models", headers=ADMIN, data=form, files={"file": ("m.onnx", bomb)})
    assert refused.status_code == 422 and refused.json()["field"] == "file", refused.text
    assert "'x' of shape [-1, 30000000] holds 30,000,000 values per sample" in refused.json()["message"], refused.text
    signature = (
        '{"inputs": [{"name": "x", "datatype": "FP32", "shape": [-1, 30000000]}], '
        '"outputs": [{"name": "y", "datatype": "FP32", "shape": [-1]}]}'
    )
    form = {"name": "bomb", "version": "2", "format": "torchscript", "signature": signature}
    declared = leader.client.post("/api/v1/models", headers=ADMIN, data=form, files={"file": ("m.pt", b"PK\x03\x04")})
    assert declared.status_code == 422 and declared.json()["field"] == "signature", declared.text
    assert "holds 30,000,000 values per sample" in declared.json()["message"], declared.text
    assert leader.db.models.count_documents({}) == 0

    leader.upload_model(name="wide", data=identity_model(dims=("batch", 1_000_000)))  # 1 M values a sample: fine
    spec = "name: w\nmodel: wide:1\nbackends: [onnxruntime]\nbatch_sizes: [1, 16]\nload: {rate: 50, duration: 10s}\n"
    answer = leader.client.post("/api/v1/jobs", headers={**ADMIN, "Content-Type": "application/yaml"}, content=spec)
    assert answer.status_code == 422 and answer.json()["field"] == "batch_sizes", answer.text
    assert "a request of batch 16 to wide:1 holds 16,000,000 values" in answer.json()["message"], answer.text
    assert "(batch sizes up to 8 fit)" in answer.json()["message"]
