"""A job's service-level objective: latency percentiles a point must meet, and for a language model the limits each
request must meet to count toward goodput (and the share that must: the attainment)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from common.base import StrictModel


class SLO(StrictModel):
    """Latency objectives a point must meet (measured from the intended send time); for a language model also what a
    request must meet to count toward goodput, and the share of requests that must (MLPerf's and DistServe's goodput)."""

    p50_ms: Annotated[float, Field(gt=0)] | None = None
    """The p50 latency limit in ms, from the intended send time."""
    p99_ms: Annotated[float, Field(gt=0)] | None = None
    """The p99 latency limit in ms, from the intended send time."""
    ttft_ms: Annotated[float, Field(gt=0)] | None = None
    """A language-model request's time-to-first-token limit in ms, from the intended send time (goodput)."""
    tpot_ms: Annotated[float, Field(gt=0)] | None = None
    """A language-model request's time-per-output-token limit in ms (goodput)."""
    e2e_ms: Annotated[float, Field(gt=0)] | None = None
    """A language-model request's end-to-end limit in ms, from the intended send time (goodput)."""
    attainment: Annotated[float, Field(gt=0, le=1)] = 0.95
    """The share of a language-model point's requests that must meet every per-request limit given (ttft_ms, tpot_ms,
    e2e_ms) for the point to meet the SLO; failed and unanswered requests count as missing them."""

    @property
    def per_request(self) -> bool:
        """Whether there is a per-request (goodput) limit."""
        return self.ttft_ms is not None or self.tpot_ms is not None or self.e2e_ms is not None

    @property
    def percentiles(self) -> bool:
        """Whether there is a latency percentile limit."""
        return self.p50_ms is not None or self.p99_ms is not None
