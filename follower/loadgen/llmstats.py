"""A language-model point's figures from its measured requests' token records, and the rules its tokens must keep.

Definitions (vLLM's benchmark client's, but from the intended time where a user waits). A token event is every
streamed event with choices, its text empty or not (a token whose bytes do not complete a character yet arrives
with empty text, its bytes in the next event: 3-8% of vLLM's events), except a chat answer's role announcement and
an empty closing event (follower/protocols/transports/openai_stream.py, `is_token_event`):
  - TTFT: the first token event, from the intended time (`ttft_ms`) and from the send (`ttft_sent_ms`);
  - ITL: the gap between successive token events, every request's gaps pooled (`itl_ms`), and each request's mean
    gap (`itl_request_ms`). A server that sends one event per token (vLLM, SGLang, llama.cpp) gives the per-token
    gaps; an event carrying k tokens, where the server counts in every event (asked of vLLM and SGLang), is k
    arrivals at its time (the first one's gap since the previous event, the others' 0); without that count it is one
    gap, and the token check below shows it as fewer events than tokens;
  - TPOT: per request, (last token event - first token event) / (output tokens - 1), the output tokens the server's;
  - goodput: requests per second meeting every per-request limit of the SLO: `ttft_ms` and `e2e_ms` (from the
    intended time) and `tpot_ms` (DistServe's definition), over the measured window; its share of all the window's
    requests (a failed or unanswered one misses) is the attainment the SLO asks for, with its Wilson interval.

Token truth: every figure counts tokens by the server's own count (its usage), never the client's. Per request the
asked output length, the server's count, the stream's token events and the client tokenizer's count of the text
are all kept. A request disagrees when its answer has no usage, when the server gave other than what was asked with
the length enforced (ignore_eos), when it streamed more token events than it says it generated tokens (fewer means
events that carried several tokens), or when its count of the prompt is not the
length the prompt was built to (where the server renders the prompt its own way, images or the Messages and Responses
APIs, one offset on every request, as vLLM's Responses API's one token, is kept as `prompt_rendering_tokens` and
shown, not counted against each request; chat and completions must agree exactly). The client tokenizer's count is shown, not
judged: re-tokenizing generated text does not give back the generated tokens (a byte-level BPE re-splits it; on the
canonical LLM's random output by 10-15%), which is why tools that count on the client miscount. A point with more
than MISMATCH_SHARE_MAX of its requests disagreeing is invalid, as is one whose streams arrive buffered (all events
in one read: no time to first token).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from common.spec.llm import LlmWorkload
from common.spec.slo import SLO
from common.stats import block_bootstrap_ci, encode, histogram_of, quantile, summarize_ns, wilson_interval
from common.wire.results import LlmFigures, Reason
from follower.loadgen.llmprompts import PromptMaker
from follower.loadgen.llmrecords import ttft_ns
from follower.loadgen.records import LoadRecords

MISMATCH_SHARE_MAX = 0.01
BUFFERED_SHARE_MAX = 0.01
MIN_BUFFER_EVENTS = 3  # a stream of fewer events cannot be told from a short answer


@dataclass(frozen=True)
class LlmJudgement:
    figures: LlmFigures
    reasons: list[Reason]


def llm_figures(
    records: LoadRecords,
    duration_s: float,
    asked: tuple[np.ndarray, np.ndarray],
    workload: LlmWorkload,
    slo: SLO | None,
    maker: PromptMaker | None,
) -> LlmJudgement | None:
    """The figures of a measured window (records cut to it; `asked` each request's prompt tokens and the output
    tokens it asked for, in the same order)."""
    cols = records.llm
    if cols is None:
        return None
    ok = records.ok
    idx = np.flatnonzero(ok)
    first, last = cols.first_token_ns(), cols.last_token_ns()
    has_token = ok & (first >= 0)
    intended, sent, done = records.intended_ns, records.sent_ns, records.done_ns
    gaps = [np.diff(t) for i in idx if (t := cols.token_times[i]) is not None and len(t) > 1]
    pooled = np.concatenate(gaps) if gaps else np.zeros(0, dtype=np.int64)
    per_request_gap = np.array([g.mean() for g in gaps if len(g)], dtype=np.float64)
    out_tokens = cols.completion_tokens
    multi = has_token & (out_tokens > 1)
    tpot = (last[multi] - first[multi]) / (out_tokens[multi] - 1)
    counted = has_token & (out_tokens > 0)
    decode_s = (done[counted] - first[counted]) / 1e9
    user_rate = out_tokens[counted][decode_s > 0] / decode_s[decode_s > 0]
    client = np.array([cols.client_count(int(i), maker) for i in idx], dtype=np.int64)
    server = out_tokens[idx]
    held, wanted = asked[0][idx], asked[1][idx]
    token_events = np.array([0 if (t := cols.token_times[i]) is None else len(t) for i in idx], dtype=np.int64)
    # The prompt was built to its length by the model's tokenizer: the server must count the same.
    # Where the server renders the prompt its own way (images, the Messages and Responses APIs: vLLM's Responses API
    # counts every prompt one token longer than the chat template renders it), one offset on every request is that
    # rendering, kept and shown; any other difference, and any difference on chat or completions, disagrees.
    offsets = cols.prompt_tokens[idx] - held
    rendered = int(offsets[0]) if workload.server_renders and len(offsets) and (offsets == offsets[0]).all() else 0
    if workload.api == "embeddings":  # nothing generated: the prompt's count is the one to agree on
        disagree = cols.prompt_tokens[idx] != held
    elif workload.api == "rerank":  # a score per document: its usage counts query-document pairs as it joins them
        disagree = np.zeros(len(idx), dtype=bool)
    else:
        disagree = (server < 0) | (token_events > server) | (cols.prompt_tokens[idx] != held + rendered)
    if workload.ignore_eos and not workload.pooled:
        disagree |= server != wanted
    buffered = np.array(
        [t is not None and len(t) >= MIN_BUFFER_EVENTS and t[0] == t[-1] for t in (cols.token_times[i] for i in idx)], dtype=bool
    )
    goodput = _goodput(slo, records, first, tpot_of=(multi, tpot), has_token=has_token, duration_s=duration_s)
    ttfts = ttft_ns(np.where(ok, first, -1), intended)  # the answered requests'
    # Block bootstrap over intended time (as for latency): slow first tokens come in bursts.
    bounds = block_bootstrap_ci(intended[has_token], ttfts, (0.50, 0.99)) or []
    ttft_ci = {name: (lo / 1e6, hi / 1e6) for name, (lo, hi) in zip(("p50", "p99"), bounds, strict=False)}
    figures = LlmFigures(
        ttft_ms=summarize_ns(ttfts),
        ttft_ci_ms=ttft_ci or None,
        ttft_hdr=encode(histogram_of(ttfts.tolist())) if len(ttfts) else None,
        ttft_sent_ms=summarize_ns(first[has_token] - sent[has_token]),
        itl_ms=summarize_ns(pooled),
        itl_request_ms=summarize_ns(per_request_gap.astype(np.int64)),
        tpot_ms=summarize_ns(tpot.astype(np.int64)),
        e2e_sent_ms=summarize_ns(done[ok] - sent[ok]),
        output_tokens_per_s=float(np.maximum(server, 0).sum()) / duration_s,
        input_tokens_per_s=float(np.maximum(cols.prompt_tokens[idx], 0).sum()) / duration_s,
        user_tokens_per_s_p50=quantile(user_rate, 0.5) if len(user_rate) else None,
        goodput_rps=goodput.per_s if goodput else None,
        goodput_share=goodput.share if goodput else None,
        goodput_requests=goodput.good if goodput else None,
        goodput_of=goodput.of if goodput else None,
        goodput_ci=wilson_interval(goodput.good, goodput.of) if goodput else None,
        output_tokens_asked=int(wanted.sum()),
        output_tokens_server=int(np.maximum(server, 0).sum()),
        output_tokens_client=int(np.maximum(client, 0).sum()),
        token_events=int(token_events.sum()),
        mismatched_requests=int(disagree.sum()),
        buffered_requests=int(buffered.sum()),
        items_per_s=len(idx) * workload.inputs_per_request / duration_s if workload.pooled else None,
        prompt_rendering_tokens=rendered or None,
    )
    return LlmJudgement(figures, _reasons(figures, len(idx), workload))


@dataclass(frozen=True)
class Goodput:
    """The requests of a measured window meeting every per-request limit of the SLO, against all its requests."""

    good: int
    of: int
    per_s: float

    @property
    def share(self) -> float:
        return self.good / self.of if self.of else 0.0


def _goodput(
    slo: SLO | None,
    records: LoadRecords,
    first: np.ndarray,
    *,
    tpot_of: tuple[np.ndarray, np.ndarray],
    has_token: np.ndarray,
    duration_s: float,
) -> Goodput | None:
    """The requests meeting the SLO's ttft_ms, tpot_ms and e2e_ms (each from the intended time where a user waits) of
    all the window's requests: a failed or unanswered one meets none; None without such limits."""
    if slo is None or not slo.per_request:
        return None
    intended = records.intended_ns
    good = has_token.copy()
    if slo.ttft_ms is not None:
        good &= (first - intended) <= slo.ttft_ms * 1e6
    if slo.tpot_ms is not None:
        multi, tpot = tpot_of
        tpot_full = np.zeros(len(first))
        tpot_full[multi] = tpot
        good &= tpot_full <= slo.tpot_ms * 1e6
    if slo.e2e_ms is not None:
        good &= records.ok & ((records.done_ns - intended) <= slo.e2e_ms * 1e6)
    count = int(good.sum())
    return Goodput(good=count, of=len(good), per_s=count / duration_s)


def _reasons(figures: LlmFigures, answered: int, workload: LlmWorkload) -> list[Reason]:
    reasons = []
    if answered and figures.mismatched_requests / answered > MISMATCH_SHARE_MAX:
        reasons.append(
            Reason(
                code="token_mismatch",
                text=(
                    f"token counts disagree on {figures.mismatched_requests} of {answered} requests: asked "
                    f"{figures.output_tokens_asked} output tokens, the server counted {figures.output_tokens_server} and "
                    f"streamed {figures.token_events} token events (the client's tokenizer finds "
                    f"{figures.output_tokens_client} in the text)"
                    + ("" if workload.ignore_eos else " (lengths not enforced: ignore_eos is off)")
                ),
            )
        )
    if workload.stream and answered and figures.buffered_requests / answered > BUFFERED_SHARE_MAX:
        reasons.append(
            Reason(
                code="buffered_stream",
                text=(
                    f"{figures.buffered_requests} of {answered} streamed answers arrived with all their token events at once "
                    "(a buffering proxy or server): their time to first token is their whole answer's"
                ),
            )
        )
    return reasons
