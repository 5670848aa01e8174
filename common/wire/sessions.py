"""What a point of LLM sessions reports beside its requests' figures: per turn and per session."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from common.wire.percentiles import Percentiles


class TurnFigures(BaseModel):
    """The measured requests of one turn index (0: each session's first), fanned-out requests included."""

    model_config = ConfigDict(extra="forbid")

    turn: int
    requests: int
    prompt_tokens_mean: float  # what the growing context came to at this turn
    ttft_ms: Percentiles | None  # first token, from the turn's due time (its answer before, plus the think time)


class SessionFigures(BaseModel):
    """The sessions that arrived in the measured window, and their turns."""

    model_config = ConfigDict(extra="forbid")

    started: int
    completed: int  # every turn answered
    cut: int  # turns left unsent at the run's end
    failed: int  # a turn that did not answer
    turns_mean: float  # turns sent per session started
    by_turn: list[TurnFigures]
    session_ms: Percentiles | None = None  # completed sessions: first turn due to last answer
    tokens_mean: float | None = None  # completed sessions: prompt and output tokens over all their requests
    goodput: float | None = None  # completed sessions per second whose every request met the SLO's ttft_ms and tpot_ms
    goodput_share: float | None = None  # ... as a share of the sessions started
