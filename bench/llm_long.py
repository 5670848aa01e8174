"""bench/llm.py section 4, long context: a 100,000-token prompt and a 4,000-token streamed answer through benchfleet's
streaming client (follower/protocols/transports/openai_stream.py, the follower's read path) against the fast fake
server (bench/fake_llm_fast.py) on its own core, tokens --long-gap-ms apart; the reference, in the same run, is the
same answer after a 16-token prompt. Per case, one request at a time: the client's received token rate (its token
events' arrival: (n - 1) / (last - first)) against the rate the server wrote them at by its own clock and count (its
--stats line), the client's CPU per request and per token event, and the time to send the prompt and see the first
token. The client's read path is not the bottleneck when the received rate is the written rate (ratio ~1) at 100k
as at 16 tokens.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import uvloop

from common.procs import SupervisedProcess, free_port, http_ready
from common.spec.llm import LlmWorkload, TokenLengths
from follower.loadgen.llmprompts import PromptMaker, llm_bodies
from follower.protocols.transports.openai_stream import OpenAiStreamTransport

FAKE = Path(__file__).with_name("fake_llm_fast.py")


def _case(url: str, maker: PromptMaker, prompt_tokens: int, output_tokens: int, requests: int) -> dict[str, float]:
    """`requests` answers one after another: the client's rates, CPU and TTFT (medians)."""
    workload = LlmWorkload(prompt_tokens=TokenLengths(mean=prompt_tokens), output_tokens=TokenLengths(mean=output_tokens))
    bodies, _, held, _ = llm_bodies(workload, "fake", maker, requests, seed=4)

    async def main() -> tuple[list[float], list[float], list[int], list[int], float]:
        rates, ttfts, events, counted = [], [], [], []
        async with OpenAiStreamTransport(url, max_concurrency=1, timeout_s=120) as transport:
            encoded = [transport.encode(b) for b in bodies]
            cpu0 = time.process_time()
            for body in encoded:
                sent = time.monotonic_ns()
                answer = await transport.request(body)
                stream = answer.stream
                assert answer.status == 200 and stream is not None, answer.error
                times = np.asarray(stream.events_ns, dtype=np.int64)
                rates.append((len(times) - 1) / ((times[-1] - times[0]) / 1e9))
                ttfts.append((times[0] - sent) / 1e6)
                events.append(len(times))
                counted.append(stream.completion_tokens or 0)
            return rates, ttfts, events, counted, time.process_time() - cpu0

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        rates, ttfts, events, counted, cpu_s = runner.run(main())
    return {
        "received_tok_s": float(np.median(rates)),
        "ttft_ms": float(np.median(ttfts)),
        "cpu_ms_per_request": 1e3 * cpu_s / requests,
        "cpu_us_per_event": 1e6 * cpu_s / max(sum(events), 1),
        "events_whole": float(all(e == output_tokens for e in events) and all(c == output_tokens for c in counted)),
        "prompt_tokens": float(held[0]),
    }


def _written(stats: Path, skip: int) -> tuple[float, int]:
    """The server's own rate (median over its answers after the first `skip`) and its count of the prompt's words."""
    lines = [json.loads(line) for line in stats.read_text().splitlines()][skip:]
    rates = [(d["tokens"] - 1) / (d["last_s"] - d["first_s"]) for d in lines]
    return float(np.median(rates)), int(lines[0]["prompt_words"])


def long_context(args: argparse.Namespace, maker: PromptMaker, results: dict[str, float]) -> None:
    cores = sorted(os.sched_getaffinity(0))
    srv_core = cores[-1] if len(cores) > 1 else None
    if srv_core is not None and len(cores) > 1:
        os.sched_setaffinity(0, {cores[0]})  # the client on its own core, the server on the other
    with tempfile.TemporaryDirectory() as tmp:
        stats, port = Path(tmp) / "stats.jsonl", free_port()
        argv = [
            sys.executable,
            str(FAKE),
            "--port",
            str(port),
            "--ttft-ms",
            "1",
            "--gap-ms",
            str(args.long_gap_ms),
            "--stats",
            str(stats),
        ]
        if srv_core is not None:
            argv = ["taskset", "-c", str(srv_core), *argv]
        with SupervisedProcess(argv, name="fake LLM", log_path=Path(tmp) / "fake.log") as srv:
            srv.wait_ready(http_ready(f"http://127.0.0.1:{port}/v1/models"), timeout_s=30)
            url = f"http://127.0.0.1:{port}/v1/completions"
            print(
                f"4. long context: {args.long_output} tokens {args.long_gap_ms:g} ms apart after a prompt of "
                f"{args.long_prompt} tokens, and of 16 (the reference); {args.long_requests} requests each, one at a time"
            )
            head = ("prompt", 8), ("received tok/s", 15), ("written tok/s", 14), ("ratio", 6), ("CPU ms/req", 11)
            print(" ".join(f"{name:>{width}}" for name, width in (*head, ("us/event", 9), ("TTFT ms", 8))))
            seen = 0
            figures = {}
            for name, prompt in (("short", 16), ("long", args.long_prompt)):
                case = _case(url, maker, prompt, args.long_output, args.long_requests)
                written, words = _written(stats, seen)
                seen += args.long_requests
                case |= {"written_tok_s": written, "ratio": case["received_tok_s"] / written, "server_prompt_words": words}
                figures[name] = case
                print(
                    f"{int(case['prompt_tokens']):>8} {case['received_tok_s']:15.0f} {written:14.0f} {case['ratio']:6.3f} "
                    f"{case['cpu_ms_per_request']:11.1f} {case['cpu_us_per_event']:9.2f} {case['ttft_ms']:8.1f}"
                    + ("" if case["events_whole"] else "  (streams not whole)")
                )
    short, long = figures["short"], figures["long"]
    results |= {
        "long_prompt_tokens": long["prompt_tokens"],
        "long_server_prompt_words": long["server_prompt_words"],
        "long_received_over_written": long["ratio"],
        "short_received_over_written": short["ratio"],
        "long_received_tok_s": long["received_tok_s"],
        "long_cpu_ms_per_request": long["cpu_ms_per_request"],
        "long_cpu_over_short": long["cpu_ms_per_request"] / short["cpu_ms_per_request"],
        "long_ttft_ms": long["ttft_ms"],
        "long_streams_whole": long["events_whole"],
    }
