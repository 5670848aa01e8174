"""A job's target: URLs that fit the protocol and hold no credentials, what a target job may not ask for, and secrets
that cannot inject a header (the URLs the load goes to: tests/unit/follower/test_protocols.py)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from common.spec.grid import expand
from common.spec.job import JobSpec
from common.spec.needs import offered_backends
from common.wire.secrets import SecretCreate


def _job(**extra: Any) -> JobSpec:
    return JobSpec.model_validate({"name": "t", "model": "m", "load": {"rate": 10}, **extra})


@pytest.mark.parametrize(("target", "says"), [
    ({"url": "http://user:pw@h:1", "protocol": "kserve-http"}, "must not hold credentials"),
    ({"url": "grpc://h:1", "protocol": "kserve-http"}, "needs a http or https"),
    ({"url": "http://h:1", "protocol": "kserve-grpc"}, "needs a grpc or grpcs"),
    ({"url": "https://h:1", "protocol": "tfserving-grpc"}, "needs a grpc or grpcs"),
    ({"url": "http://h:1?x=1", "protocol": "kserve-http"}, "no query"),
    ({"url": "http://h:1", "protocol": "kserve-http", "ca_bundle": "ca"}, "needs an https"),
    ({"url": "http://h:99999", "protocol": "kserve-http"}, "bad port"),
])  # fmt: skip
def test_bad_targets_are_refused_naming_what_is_wrong(target: dict[str, Any], says: str) -> None:
    with pytest.raises(ValidationError, match=says):
        _job(target=target)


def test_a_target_job_runs_the_endpoint_backend_and_starts_nothing() -> None:
    target = {"url": "http://h:1", "protocol": "kserve-http"}
    assert _job(target=target).backends == ["endpoint"]
    refused = (
        ({"backends": ["onnxruntime"]}, "backends must be"),
        ({"network": {"profile": "4g"}}, "network"),
        ({"split": {"max_parts": 2}}, "split"),
        ({"repeats": {"count": 2, "fresh_server": True}}, "fresh_server"),
    )
    for extra, says in refused:
        with pytest.raises(ValidationError, match=says):
            _job(target=target, **extra)
    with pytest.raises(ValidationError, match="needs a target"):
        _job(backends=["endpoint"])
    assert "endpoint" in offered_backends([], [])  # every follower can drive one


@pytest.mark.parametrize("value", ["a\r\nX-Injected: 1", "tab\tok\n", "", "é"])
def test_a_header_secret_cannot_break_the_request(value: str) -> None:
    with pytest.raises(ValidationError) as info:
        SecretCreate(name="k", value=value)
    assert value not in str(info.value) or not value  # the value is not echoed in the error


def test_reserved_headers_and_ca_bundles() -> None:
    with pytest.raises(ValidationError, match="set by the load generator"):
        SecretCreate(name="k", header="Content-Length", value="1")
    with pytest.raises(ValidationError, match="PEM certificates"):
        SecretCreate(name="k", kind="ca_bundle", value="not a certificate")
    assert SecretCreate(name="k", header="X-Api-Key", value="abc").header == "X-Api-Key"


def test_an_openai_targets_points_carry_its_language_model_requests() -> None:
    """An OpenAI-compatible target is a language model's endpoint: its points get the job's llm workload (or the
    default one), as an LLM backend's would; a tensor target's get none."""
    llm = _job(target={"url": "http://h:8000", "protocol": "openai"}, llm={"prompt_tokens": 32, "output_tokens": 8})
    (point,) = expand(llm)
    assert point.backend == "endpoint" and point.llm is not None and point.llm.output_tokens.mean == 8
    (default,) = expand(_job(target={"url": "http://h:8000", "protocol": "openai"}))
    assert default.llm is not None
    (tensor,) = expand(_job(target={"url": "http://h:8000", "protocol": "kserve-http"}, inputs=[
        {"name": "x", "datatype": "FP32", "shape": [-1, 2]}]))  # fmt: skip
    assert tensor.llm is None


def test_a_wire_audit_is_asked_only_of_plain_http_and_reaches_every_point() -> None:
    plain = _job(target={"url": "http://h:1", "protocol": "openai"}, audit="wire")
    assert {p.audit for p in expand(plain)} == {"wire"}
    assert {p.audit for p in expand(_job(target={"url": "http://h:1", "protocol": "openai"}))} == {"off"}
    for target in ({"url": "https://h:1", "protocol": "kserve-http"}, {"url": "grpc://h:1", "protocol": "kserve-grpc"}):
        with pytest.raises(ValidationError, match=r"audit\n.*a wire audit reads HTTP/1.1 off the wire"):
            _job(target=target, audit="wire")
    with pytest.raises(ValidationError, match="audit"):
        _job(audit="tcpdump")
