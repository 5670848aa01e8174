"""A language-model point's inputs and figures: drawn lengths hit their token targets exactly by the model's own
tokenizer, and TTFT, ITL, TPOT, goodput and the token rules come out as defined on records of known timing."""

from __future__ import annotations

import io

import numpy as np
import orjson
import pytest

from benchfleet.generate.llmgen import LlamaSpec, generate
from common.formats import hfbundle
from common.spec.llm import LlmWorkload, TokenLengths
from common.spec.slo import SLO
from common.wire.records import LLM_OFFSETS, LLM_TOKENS, decode, per_request
from follower.loadgen.llmprompts import PromptMaker, llm_bodies
from follower.loadgen.llmrecords import LlmColumns
from follower.loadgen.llmstats import llm_figures
from follower.loadgen.records import LoadRecords, encode_records
from follower.protocols.transports.base import Stream

MS = 1_000_000


@pytest.fixture(scope="module")
def maker() -> PromptMaker:
    data, _ = generate(LlamaSpec(layers=1, hidden=64, heads=2, kv_heads=2, intermediate=128, vocab=2048, context=512))
    return PromptMaker(*hfbundle.tokenizer_files(io.BytesIO(data), limit_bytes=10**8))


@pytest.mark.parametrize("lengths", [
    TokenLengths(mean=40), TokenLengths(dist="uniform", min=5, max=300), TokenLengths(dist="normal", mean=100, std=30),
    TokenLengths(dist="lognormal", mean=120, sigma=0.8, max=1000),
])  # fmt: skip
def test_drawn_prompt_lengths_are_exact_by_the_models_tokenizer(maker: PromptMaker, lengths: TokenLengths) -> None:
    workload = LlmWorkload(prompt_tokens=lengths, output_tokens=TokenLengths(dist="uniform", min=1, max=64))
    bodies, index, held, asked = llm_bodies(workload, "m", maker, 200, seed=4)
    drawn = lengths.draw(200, np.random.default_rng(4))  # the same stream the bodies drew from
    docs = [orjson.loads(b) for b in bodies]
    assert [maker.count(d["prompt"]) for d in docs] == [max(int(n), maker.added + 1) for n in drawn] == list(held)
    assert list(index) == list(range(200)) and [d["max_tokens"] for d in docs] == list(asked)
    assert all(d["min_tokens"] == d["max_tokens"] and d["ignore_eos"] and d["stream"] for d in docs)
    assert drawn.min() >= lengths.min and drawn.max() <= lengths.upper
    if lengths.dist in ("fixed", "normal", "lognormal"):
        assert abs(drawn.mean() - lengths.mean) < 0.15 * lengths.mean


def test_a_chat_request_is_exact_with_the_templates_own_tokens(maker: PromptMaker) -> None:
    workload = LlmWorkload(api="chat", prompt_tokens=TokenLengths(dist="uniform", min=2, max=120), output_tokens=8)
    bodies, _, held, _ = llm_bodies(workload, "m", maker, 50, seed=9)
    docs = [orjson.loads(b) for b in bodies]
    assert all("prompt" not in d and [m["role"] for m in d["messages"]] == ["user"] for d in docs)
    rendered = [maker.render_chat(d["messages"][0]["content"]) for d in docs]
    assert all(r.startswith("<s><|user|> ") and r.endswith("<|assistant|> ") for r in rendered)
    counts = [len(maker.tokenizer.encode(r, add_special_tokens=False).ids) for r in rendered]
    drawn = TokenLengths(dist="uniform", min=2, max=120).draw(50, np.random.default_rng(9))
    assert counts == list(held) == [max(int(n), maker.chat_overhead() + 1) for n in drawn]
    assert maker.chat_overhead() >= 3  # <s>, <|user|> and <|assistant|> at least


def _records(streams: list[tuple[int, int, list[int], int]], asked: int) -> tuple[LoadRecords, tuple[np.ndarray, np.ndarray]]:
    """Requests (intended ms, sent ms, token event ms, server's output tokens), each done 1 ms after its last event."""
    offsets = np.array([s[0] * MS for s in streams], dtype=np.int64)
    rec = LoadRecords.allocate(0, offsets)
    rec.llm = LlmColumns.allocate(len(streams))
    for i, (_, sent, events, tokens) in enumerate(streams):
        rec.sent_ns[i] = sent * MS
        rec.first_byte_ns[i] = events[0] * MS
        rec.done_ns[i] = (events[-1] + 1) * MS
        rec.status[i] = 200
        rec.llm.add(i, Stream([e * MS for e in events], b" w" * len(events), 10, tokens, events=len(events) + 1))
    return rec, (np.full(len(streams), 10, dtype=np.int64), np.full(len(streams), asked, dtype=np.int64))


def test_ttft_itl_tpot_and_goodput_are_as_defined() -> None:
    # Request 0: intended 0, sent at 2, tokens at 10, 14, 18, 22 (4 tokens). Request 1: intended 100, sent 100 (on
    # time), tokens at 150, 160, 170, 180. Request 2: intended 200, sent 201, tokens at 205, 206, 207, 208.
    streams = [(0, 2, [10, 14, 18, 22], 4), (100, 100, [150, 160, 170, 180], 4), (200, 201, [205, 206, 207, 208], 4)]
    rec, asked = _records(streams, 4)
    slo = SLO(ttft_ms=20, tpot_ms=5)
    judged = llm_figures(rec, 1.0, asked, LlmWorkload(), slo, None)
    assert judged is not None and judged.reasons == []
    f = judged.figures
    assert f.ttft_ms is not None and f.ttft_sent_ms is not None
    assert sorted([f.ttft_ms.p50, f.ttft_ms.max]) == pytest.approx([10, 50], rel=1e-3)  # 10, 50, 5 from intended
    assert f.ttft_sent_ms.max == pytest.approx(50, rel=1e-3) and f.ttft_sent_ms.p50 == pytest.approx(8, rel=1e-3)
    assert f.itl_ms is not None and f.itl_ms.count == 9 and f.itl_ms.max == pytest.approx(10, rel=1e-3)
    # TPOT: (last - first) / (tokens - 1) = 12/3 = 4, 30/3 = 10, 3/3 = 1 ms.
    assert f.tpot_ms is not None and f.tpot_ms.max == pytest.approx(10, rel=1e-3) and f.tpot_ms.p50 == pytest.approx(4, rel=1e-3)
    # Goodput: request 0 (ttft 10, tpot 4) and request 2 (5, 1) meet both; request 1 (50, 10) meets neither.
    assert (f.goodput_rps, f.goodput_share) == (2.0, pytest.approx(2 / 3))
    assert (f.output_tokens_asked, f.output_tokens_server, f.token_events) == (12, 12, 12)
    assert f.output_tokens_per_s == 12.0 and f.input_tokens_per_s == 30.0


def test_counts_that_disagree_and_buffered_streams_invalidate_the_point() -> None:
    # The server gave 3 tokens where 4 were asked; another streamed 5 text events for 4 counted tokens; three arrive
    # with all their events in one read.
    streams = [(0, 0, [5, 6, 7], 3), (10, 10, [15, 16, 17, 18, 19], 4)] + [(20 + i, 20 + i, [30 + i] * 4, 4) for i in range(3)]
    rec, asked = _records(streams, 4)
    assert rec.llm is not None
    rec.llm.prompt_tokens[2] = 11  # and one the server counted a prompt token more than the prompt was built to hold
    judged = llm_figures(rec, 1.0, asked, LlmWorkload(), None, None)
    assert judged is not None and judged.figures.goodput_rps is None  # no TTFT/TPOT objective: no goodput
    codes = [r.code for r in judged.reasons]
    assert codes == ["token_mismatch", "buffered_stream"], judged.reasons
    assert judged.figures.mismatched_requests == 3 and judged.figures.buffered_requests == 3


def test_a_language_models_records_are_stored_and_exported_per_request() -> None:
    streams = [(0, 0, [5, 6, 7], 3), (10, 11, [15], 1), (20, 20, [30, 31], 2)]
    rec, _ = _records(streams, 3)
    arrays = decode(encode_records(rec))
    assert list(arrays["llm_completion_tokens"]) == [3, 1, 2] and list(arrays["llm_prompt_tokens"]) == [10, 10, 10]
    offsets, tokens = arrays[LLM_OFFSETS], arrays[LLM_TOKENS]
    assert [list(tokens[offsets[i] : offsets[i + 1]] // MS) for i in range(3)] == [[5, 6, 7], [15], [30, 31]]
    assert len(per_request(arrays)["llm_events"]) == 3
    # One token event each: the flat array is as long as a column, and still stays out of the per-request table.
    one, _ = _records([(0, 0, [5], 1), (10, 10, [15], 1), (20, 20, [25], 1)], 1)
    table = per_request(decode(encode_records(one)))
    assert LLM_TOKENS not in table and LLM_OFFSETS not in table and list(table["llm_completion_tokens"]) == [1, 1, 1]


def test_a_live_window_of_a_language_model_shows_its_token_rate_and_ttft() -> None:
    from follower.loadgen.windows import window_stats

    # Window [0, 1 s): three requests intended at 0, 100 and 200 ms. The first two answered (10 and 6 tokens; first
    # tokens 50 and 400 ms after their intended times); the third still waits for its first token at 1 s.
    rec = LoadRecords.allocate(0, np.array([0, 100 * MS, 200 * MS], dtype=np.int64))
    rec.llm = LlmColumns.allocate(3)
    for i, (first_ms, tokens) in enumerate([(50, 10), (500, 6)]):
        rec.sent_ns[i], rec.first_byte_ns[i], rec.done_ns[i], rec.status[i] = i * 100 * MS, first_ms * MS, 600 * MS, 200
        rec.llm.add(i, Stream([first_ms * MS, (first_ms + 5) * MS], b"x", 4, tokens, events=3))
    rec.sent_ns[2] = 200 * MS
    (window,) = window_stats(rec, 0, 1000 * MS, 1000 * MS)
    assert window.tokens_per_s == 16.0  # the server's counts of the answered requests, per second of window
    # TTFTs: 50 ms, 400 ms and the waiting request's age (800 ms): p99 close to the largest.
    assert window.ttft_p99_ms == 800.0  # the nearest rank: the 3rd of 3 (0.99 x 3 = 2.97, rounded up)
    # The window's inter-token latency: the gaps between the answered requests' token events (5 ms each here).
    assert window.itl_p50_ms == pytest.approx(5.0)
    tensor = LoadRecords.allocate(0, np.array([0], dtype=np.int64))
    (plain,) = window_stats(tensor, 0, 1000 * MS, 1000 * MS)
    assert plain.tokens_per_s is None and plain.ttft_p99_ms is None and plain.itl_p50_ms is None


def test_a_language_models_stage_breakdown_joins_the_servers_stages_to_the_clients_time() -> None:
    from common.wire.results import LlmFigures, LlmServerView, Percentiles
    from follower.point.result import llm_stages

    e2e = Percentiles(count=10, mean=100.0, p50=100.0, p90=100.0, p95=100.0, p99=100.0, p999=100.0, max=100.0)
    server = LlmServerView(requests=10, prompt_tokens=100, generation_tokens=100, queue_ms_mean=5.0, prefill_ms_mean=15.0,
                           decode_ms_mean=70.0, e2e_ms_mean=92.0)  # fmt: skip
    figures = LlmFigures(ttft_ms=None, ttft_sent_ms=None, itl_ms=None, itl_request_ms=None, tpot_ms=None, e2e_sent_ms=e2e,
                         output_tokens_per_s=0.0, input_tokens_per_s=0.0, user_tokens_per_s_p50=None, server=server)  # fmt: skip
    assert llm_stages(figures) == {"queue": 5.0, "prefill": 15.0, "decode": 70.0, "transmission": 8.0, "service": 100.0}
    assert llm_stages(figures.model_copy(update={"server": server.model_copy(update={"prefill_ms_mean": None})})) is None
    assert llm_stages(figures.model_copy(update={"server": None})) is None


def test_a_constant_prompt_offset_is_the_servers_rendering_only_where_it_renders_its_own_way() -> None:
    """Every prompt counted one token longer: for the Responses API (the server's own rendering of its input) that is
    kept as the point's offset and no request disagrees; for chat and completions (counted as the client renders
    them) every request disagrees, as before."""
    streams = [(10 * i, 10 * i, [10 * i + 5, 10 * i + 6], 2) for i in range(4)]
    for workload, mismatched, offset in (
        (LlmWorkload(api="responses"), 0, 1),
        (LlmWorkload(api="chat"), 4, None),
        (LlmWorkload(), 4, None),
    ):
        rec, asked = _records(streams, 2)
        assert rec.llm is not None
        rec.llm.prompt_tokens[:] = 11  # built to 10
        judged = llm_figures(rec, 1.0, asked, workload, None, None)
        assert judged is not None, workload.api
        assert (judged.figures.mismatched_requests, judged.figures.prompt_rendering_tokens) == (mismatched, offset), workload.api
    rec, asked = _records(streams, 2)
    assert rec.llm is not None
    rec.llm.prompt_tokens[:] = [11, 11, 12, 11]  # not one constant: the odd one disagrees, the others are not excused
    judged = llm_figures(rec, 1.0, asked, LlmWorkload(api="responses"), None, None)
    assert judged is not None and (judged.figures.mismatched_requests, judged.figures.prompt_rendering_tokens) == (4, None)
