"""What a job may ask of LLM sessions: bounded turns, pauses and fan-out, a context that fits, an open-loop load on one
follower, and a p99 sized by the turns the sessions bring."""

from __future__ import annotations

import numpy as np
import pytest
import yaml
from pydantic import ValidationError

from common.spec.job import JobSpec
from common.spec.llm import MAX_TOKENS, LlmWorkload, Sessions, ThinkTime, TokenLengths


def _job(load: str, sessions: str = "{turns: 8}", extra: str = "") -> JobSpec:
    backends = "" if "target" in extra else "backends: [vllm]"
    return JobSpec.model_validate(
        yaml.safe_load(f"""
name: sessions
model: tiny-llama:1
{backends}
load: {load}
llm: {{prompt_tokens: 64, output_tokens: 16, sessions: {sessions}}}
{extra}""")
    )


def test_a_sessions_job_and_its_longest_context() -> None:
    job = _job(
        "{pattern: poisson, rate: 4, duration: 120s}",
        "{turns: {dist: uniform, min: 5, max: 20}, user_tokens: 24, fan_out: {share: 0.2, width: 3}}",
    )
    sessions = job.llm.sessions if job.llm else None
    assert sessions is not None and sessions.turns.expected == 12.5 and sessions.fan_out is not None
    # the last of 20 turns: the first prompt, then 19 turns of three answers and a new message
    assert job.llm is not None and job.llm.longest_prompt == 64 + 19 * (3 * 16 + 24)
    too_long = {"prompt_tokens": 64, "output_tokens": 4096, "sessions": {"turns": 64, "user_tokens": 4096}}
    with pytest.raises(ValidationError, match=f"exceed {MAX_TOKENS} tokens"):
        LlmWorkload.model_validate(too_long)


@pytest.mark.parametrize(
    ("load", "sessions", "extra", "message"),
    [
        ("{pattern: closed, concurrency: 4, duration: 60s}", "{turns: 8}", "", "not with closed, load.search or load.stability"),
        ("{pattern: poisson, rate: 500, duration: 60s, stability: {}}", "{turns: 8}", "", "not with closed, load.search"),
        ("{pattern: poisson, rate: 4, duration: 60s}", "{turns: 65}", "", "turns: at most 64 per session"),
        ("{pattern: poisson, rate: 4, duration: 60s}", "{turns: 8, fan_out: {width: 17}}", "", "less than or equal to 16"),
        ("{pattern: poisson, rate: 4, duration: 60s}", "{turns: 8, think_s: {dist: uniform, min: 1}}", "", "uniform needs max"),
        ("{pattern: poisson, rate: 4, duration: 60s}", "{turns: 8, think_s: 601}", "", "less than or equal to 600"),
        (
            "{pattern: poisson, rate: 4, duration: 60s}",
            "{turns: 8}",
            'target: {url: "http://10.0.0.1:8000", protocol: openai, shards: 2}',
            "sessions run on one follower",
        ),
        ("{pattern: poisson, rate: 4, duration: 60s}", "{from_trace: true}", "", "replays an uploaded session trace"),
        ("{pattern: trace, trace: [0, 0.5], duration: 60s}", "{from_trace: true}", "", "load.pattern trace, trace: {dataset"),
        (
            "{pattern: trace, trace: {dataset: abc}, duration: 60s}",
            "{from_trace: true, turns: 4, think_s: 2}",
            "",
            "the trace gives each session's turns, lengths and pauses: leave out think_s, turns",
        ),
    ],
)
def test_what_sessions_cannot_run_with_is_refused_naming_it(load: str, sessions: str, extra: str, message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        _job(load, sessions, extra)
    with pytest.raises(ValidationError, match="sessions build their own growing prompts"):
        LlmWorkload.model_validate({"dataset": "abc", "sessions": {"turns": 3}})


def test_think_time_draws_are_in_ns_within_their_bounds() -> None:
    rng = np.random.default_rng(1)
    assert ThinkTime.model_validate(0.25).draw(3, rng).tolist() == [250_000_000] * 3
    drawn = ThinkTime(dist="exponential", mean=1.0, max=2.0).draw(10_000, rng)
    assert drawn.min() >= 0 and drawn.max() <= 2_000_000_000 and 0.6e9 < drawn.mean() < 1.0e9
    assert Sessions(turns=TokenLengths(dist="empirical", values=[2, 4])).turns.expected == 3.0


def test_a_sessions_p99_counts_the_turns_each_session_brings() -> None:
    job = _job("{pattern: poisson, rate: 1, duration: 60s}", "{turns: 10}")
    assert job.load.p99_shortfall() is not None  # 60 sessions alone
    assert job.load.p99_shortfall(per_arrival=10) is None  # 600 requests


def test_a_sessions_points_load_reads_in_sessions_per_second() -> None:
    from common.spec.grid import expand

    job = _job("{pattern: poisson, rate: 4, duration: 120s}")
    (point,) = expand(job)
    assert point.load_label() == "4 sessions/s"


def test_a_session_trace_replayed_needs_no_drawn_turns() -> None:
    job = _job("{pattern: trace, trace: {dataset: abc}, duration: 60s}", "{from_trace: true}")
    assert job.llm is not None and job.llm.sessions is not None and job.llm.sessions.from_trace
    # its context is the trace's (bounded at upload, measured on the follower), not one drawn from turns
    assert job.llm.longest_prompt == 64
