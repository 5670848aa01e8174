"""A target's own metrics: an OpenAI-compatible endpoint's /metrics is read like a started server's (at the address
checked before contact, with the target's secret), and not read for a sharded point, an unchecked address, or an
endpoint that keeps none."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from common.spec.target import TargetSpec
from common.wire.models import ModelMeta
from follower.backends.endpoint import EndpointBackend
from follower.backends.stats import llm_server_delta
from follower.protocols import Credentials

METRICS = """# HELP vllm:prefix_cache_queries_total Prefix cache queries.
vllm:num_requests_running{engine="0",model_name="m"} 2.0
vllm:request_success_total{engine="0",finished_reason="length",model_name="m"} %d
vllm:prompt_tokens_total{engine="0",model_name="m"} %d
vllm:generation_tokens_total{engine="0",model_name="m"} 40.0
vllm:prefix_cache_queries_total{engine="0",model_name="m"} %d
vllm:prefix_cache_hits_total{engine="0",model_name="m"} %d
"""


@pytest.fixture()
def server() -> Iterator[tuple[str, list[dict[str, str]]]]:
    asked: list[dict[str, str]] = []
    counts = iter([(4, 400, 400, 100), (10, 1000, 1000, 550)])

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            asked.append({"path": self.path, "auth": self.headers.get("Authorization", "")})
            if self.path != "/metrics":
                self.send_error(404)
                return
            body = (METRICS % next(counts)).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            return None

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://localhost:{httpd.server_address[1]}", asked
    finally:
        httpd.shutdown()
        httpd.server_close()


def _backend(url: str, shards: int = 1, address: str | None = "127.0.0.1") -> EndpointBackend:
    target = TargetSpec(url=f"{url}/v1/completions", protocol="openai", shards=shards)
    backend = EndpointBackend(target, Credentials(headers=(("Authorization", "Bearer k"),), address=address))
    backend.start(__file__, ModelMeta.model_construct(name="m"), "/tmp")  # type: ignore[arg-type]
    return backend


def test_an_openai_endpoints_metrics_give_its_view_of_the_point(server: tuple[str, list[dict[str, str]]]) -> None:
    url, asked = server
    backend = _backend(url)
    view = llm_server_delta(backend.stats(), backend.stats())
    assert view is not None and (view.requests, view.prompt_tokens) == (6, 600)
    assert view.prefix_cache_hit_share == pytest.approx(450 / 600)
    # at the endpoint's origin, with the target's secret, to the checked address (the name stays in Host)
    assert asked == [{"path": "/metrics", "auth": "Bearer k"}] * 2


def test_no_metrics_are_read_for_a_sharded_point_or_an_unchecked_address(server: tuple[str, list[dict[str, str]]]) -> None:
    url, asked = server
    assert _backend(url, shards=2).stats() == {} and _backend(url, address=None).stats() == {}
    assert asked == []


def test_an_endpoint_without_metrics_gives_none() -> None:
    backend = _backend("http://127.0.0.1:9")  # nothing listens: the read fails quietly, the point goes on
    assert backend.stats() == {}


def test_vllms_prefix_cache_reset_is_asked_again_until_it_succeeds() -> None:
    """vLLM refuses a reset while blocks are held (success false): the backend asks again, and says whether it took."""
    from follower.backends.vllm import VllmBackend

    answers = iter([b'{"success": false}', b'{"success": false}', b'{"success": true}'])
    posted: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            posted.append(self.path)
            body = next(answers, b'{"success": true}')
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            return None

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        backend = VllmBackend()
        backend.host, backend.port = "127.0.0.1", httpd.server_address[1]  # as if it had started the server there
        assert backend.reset_prefix_cache() is True and posted == ["/reset_prefix_cache"] * 3
    finally:
        httpd.shutdown()
        httpd.server_close()
