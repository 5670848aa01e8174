"""The wire audit (follower/loadgen/wireaudit.py) on real loopback traffic: the capture sees every request of a run
with the kernel's timestamps, each measured request is matched to its own, the answers agree token event for token
event (empty-text and multi-token events included), and causality holds: no client stamp of a send comes after its
bytes left, none of an arrival before its bytes came. Needs CAP_NET_RAW; without it the audit says why, and these
tests skip saying so."""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest

from common.procs import SupervisedProcess, free_port, http_ready
from common.wire.audit import WireAudit
from follower.host.wirecap import SYN, open_capture
from follower.loadgen.apart import Generators, OpenLoopRun
from follower.loadgen.records import LoadRecords
from follower.loadgen.schedule import arrival_offsets_ns
from follower.loadgen.wireaudit import SLACK_NS, WireTap
from follower.protocols import Endpoint

pytestmark = pytest.mark.integration

HERE = Path(__file__).parent
WARMUP_NS = 500_000_000


def _capture_or_skip(url: str) -> None:
    opened = open_capture(url)
    if isinstance(opened, str):
        pytest.skip(f"no wire audit on this host: {opened}")
    opened.stop()


@pytest.fixture(scope="module")
def llm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Endpoint]:
    port = free_port()
    argv = [sys.executable, str(HERE / "fake_llm_server.py"), "--port", str(port), "--ttft-ms", "15", "--gap-ms", "4"]
    with SupervisedProcess(argv, name="fake LLM server", log_path=tmp_path_factory.mktemp("llm") / "server.log") as proc:
        proc.wait_ready(http_ready(f"http://127.0.0.1:{port}/v1/models"), timeout_s=30)
        _capture_or_skip(f"http://127.0.0.1:{port}/v1/completions")
        yield Endpoint("openai", f"http://127.0.0.1:{port}/v1/completions", "fake")


@pytest.fixture(scope="module")
def tensor(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Endpoint]:
    port = free_port()
    argv = [sys.executable, str(HERE / "capacity_server.py"), "--port", str(port), "--service-ms", "3", "--workers", "0"]
    with SupervisedProcess(argv, name="parallel 3 ms server", log_path=tmp_path_factory.mktemp("t") / "server.log") as proc:
        proc.wait_ready(http_ready(f"http://127.0.0.1:{port}/ready"), timeout_s=30)
        yield Endpoint("kserve-http", f"http://127.0.0.1:{port}", "m")


def _audited(url: str, endpoint: Endpoint, bodies: list[bytes], rate: float, seconds: float) -> tuple[LoadRecords, WireAudit]:
    offsets = arrival_offsets_ns("poisson", rate, seconds, seed=5)
    run = OpenLoopRun(endpoint, bodies, offsets, max_concurrency=64, timeout_s=10)
    tap = WireTap(url)
    assert tap.why_not is None, tap.why_not
    generators = Generators()
    try:
        records = generators.run(run, threading.Event()).records
    finally:
        generators.close()
        tap.stop()
    measured_from = records.start_ns + WARMUP_NS
    return records, tap.audit(records, (measured_from, records.start_ns + int(seconds * 1e9)))


def test_a_language_models_stream_is_matched_token_event_for_token_event(llm: Endpoint) -> None:
    def body(tokens: int, **extra: object) -> bytes:
        request = {"model": "fake", "prompt": "a b", "max_tokens": tokens, "stream": True}
        return json.dumps({**request, "stream_options": {"include_usage": True}, **extra}).encode()

    # Empty-text events (a token whose bytes end mid-character) and events of three tokens with the server's count.
    bodies = [
        body(12, fake_empty_every=4),
        body(9, fake_tokens_per_event=3, stream_options={"continuous_usage_stats": True}),
        body(6),
    ]
    records, audit = _audited(llm.base, llm, bodies, rate=20, seconds=3.0)
    print(audit.model_dump_json(indent=1))
    assert audit.ran and audit.drops == 0 and not audit.truncated
    measured = (records.intended_ns >= records.start_ns + WARMUP_NS) & (records.sent_ns >= 0)
    assert int(records.ok[measured].sum()) == int(measured.sum()) > 20
    # Every measured request found on the wire, its answer agreeing token for token; the whole run's are all there.
    assert audit.matched == int(measured.sum()) and audit.unmatched == 0, audit
    assert audit.wire_requests == int((records.sent_ns >= 0).sum())
    # Each request's connection recorded by the open loop: the audit pairs within it.
    assert (records.port[records.sent_ns >= 0] > 0).all()
    assert records.llm is not None
    tokens = sum(len(t) for i in np.flatnonzero(measured) if (t := records.llm.token_times[i]) is not None)
    assert audit.token_us is not None and audit.token_us.count == tokens
    # Causality (the clock offset's error as the only slack): sends stamped before they leave, arrivals after.
    slack_us = SLACK_NS / 1e3
    assert audit.send_us is not None and audit.send_us.p50 > -slack_us and audit.send_us.max < 1e6
    for spread in (audit.receive_us, audit.token_us, audit.done_us):
        assert spread is not None and spread.count > 0
    names = {f.name for f in audit.figures}
    assert names == {"latency", "ttft", "ttft_intended", "itl"}
    ttft = audit.figure("ttft")
    assert ttft is not None
    # The server waits 15 ms before its first token: both clocks see at least that.
    assert ttft.wire_p50 >= 15.0 and ttft.client_p50 >= 15.0


def test_a_tensor_servers_answers_are_matched_and_the_overheads_are_causal(tensor: Endpoint) -> None:
    url = f"{tensor.base}/v2/models/m/infer"
    records, audit = _audited(url, tensor, [b'{"inputs": []}'], rate=200, seconds=2.0)
    measured = (records.intended_ns >= records.start_ns + WARMUP_NS) & (records.sent_ns >= 0)
    assert audit.ran and audit.matched == int(measured.sum()) > 200 and audit.unmatched == 0, audit
    assert audit.token_us is None and [f.name for f in audit.figures] == ["latency"]
    latency = audit.figure("latency")
    assert latency is not None and latency.wire_p50 >= 3.0 and latency.client_p50 >= latency.wire_p50 - SLACK_NS / 1e6
    assert audit.receive_us is not None and audit.receive_us.p50 > -SLACK_NS / 1e3


def test_without_a_plain_http_target_the_audit_says_why() -> None:
    tap = WireTap("https://127.0.0.1:9/v1/completions")
    assert tap.why_not is not None and "plain HTTP" in tap.why_not
    audit = tap.audit(LoadRecords.allocate(0, np.zeros(0, dtype=np.int64)), (0, 1))
    assert not audit.ran and audit.why_not == tap.why_not


def test_a_stop_keeps_the_packets_the_kernel_already_held(tensor: Endpoint) -> None:
    """Packets that crossed the wire before the stop, but that a busy host had not let the capture's thread read yet,
    are kept: here the thread never ran, so every packet of these exchanges is still in the socket's buffer at the
    stop. (Closing without reading them lost a run's last answers, and those requests went unmatched: "no whole answer
    on the wire", 3 of 480 in a full run beside other tests.)"""
    opened = open_capture(tensor.base)
    assert not isinstance(opened, str), opened
    with httpx.Client() as client:
        for _ in range(3):
            assert client.get(f"{tensor.base}/ready").status_code == 200
    captured = opened.stop()  # never started: its thread read nothing
    assert captured.packets and captured.drops == 0, captured
    assert any(p.flags & SYN and p.outgoing for p in captured.packets)  # the connection's opening
    answers = b"".join(p.payload for p in captured.packets if not p.outgoing)
    assert answers.count(b"HTTP/1.1 200") == 3, answers[:300]
