"""MLPerf LoadGen's Server scenario over an OpenAI-compatible streaming server, for bench/import_fixtures.py.

Runs in LoadGen's own environment (bench/install_peers.sh: mlcommons-loadgen). Each query is one streamed completion
of `tokens` tokens; the first text event is reported with FirstTokenComplete, the end with QuerySamplesComplete and
its token count, so LoadGen's summary carries TTFT and TPOT. Logs land in OUT_DIR.

Usage: python bench/loadgen_sut.py BASE_URL OUT_DIR QPS TOKENS
"""

from __future__ import annotations

import array
import http.client
import json
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlparse

import mlperf_loadgen as lg  # type: ignore[import-not-found]

BASE, OUT_DIR, QPS, TOKENS = sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4])
HOST = urlparse(BASE)
POOL = ThreadPoolExecutor(max_workers=32)
LOCAL = threading.local()


def _stream(sample: lg.QuerySample) -> None:
    if not hasattr(LOCAL, "conn"):
        LOCAL.conn = http.client.HTTPConnection(HOST.hostname, HOST.port)
    body = {"model": "fake", "prompt": "hello", "max_tokens": TOKENS, "stream": True, "ignore_eos": True}
    LOCAL.conn.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    answer = LOCAL.conn.getresponse()
    tokens, first = 0, True
    for line in answer:
        if not line.startswith(b"data: {"):
            continue
        event = json.loads(line[6:])
        if event.get("choices") and event["choices"][0].get("text"):
            tokens += 1
            if first:
                first = False
                data = array.array("B", b"x")
                addr, _ = data.buffer_info()
                lg.FirstTokenComplete([lg.QuerySampleResponse(sample.id, addr, 1)])
    data = array.array("B", b"x" * tokens)
    addr, _ = data.buffer_info()
    lg.QuerySamplesComplete([lg.QuerySampleResponse(sample.id, addr, len(data), tokens)])


def issue(samples: list[lg.QuerySample]) -> None:
    for sample in samples:
        POOL.submit(_stream, sample)


def main() -> None:
    settings = lg.TestSettings()
    settings.scenario = lg.TestScenario.Server
    settings.mode = lg.TestMode.PerformanceOnly
    settings.server_target_qps = QPS
    settings.min_duration_ms = 4000
    settings.min_query_count = 16
    settings.use_token_latencies = True
    settings.ttft_latency = 2_000_000_000
    settings.tpot_latency = 200_000_000
    log = lg.LogSettings()
    log.log_output.outdir = OUT_DIR
    log.log_output.copy_summary_to_stdout = False
    sut = lg.ConstructSUT(issue, lambda: None)
    qsl = lg.ConstructQSL(64, 64, lambda s: None, lambda s: None)
    lg.StartTestWithLogSettings(sut, qsl, settings, log)
    lg.DestroyQSL(qsl)
    lg.DestroySUT(sut)
    POOL.shutdown()


if __name__ == "__main__":
    main()
