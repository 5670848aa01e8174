"""A wire audit's figures (a job's `audit: wire`): the client's clock held against the kernel's packet timestamps of
the point's own connections (follower/host/wirecap.py, follower/loadgen/wireaudit.py)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Spread(BaseModel):
    """How far the client's stamps lie from the wire's, in microseconds (positive: the client's is later)."""

    model_config = ConfigDict(extra="forbid")

    count: int
    p50: float
    p99: float
    max: float


class WireFigure(BaseModel):
    """One figure by one definition over the measured requests, as the client measured it and as the wire shows it
    (ms, nearest rank, the estimator of every figure: common/stats.py)."""

    model_config = ConfigDict(extra="forbid")

    name: str  # latency, ttft, itl, ttft_intended (from the intended send: the client's headline TTFT)
    count: int
    client_p50: float
    client_p99: float
    wire_p50: float
    wire_p99: float

    def error(self, which: str) -> float | None:
        """The client's relative error at p50 or p99 (None where the wire's figure is 0)."""
        client, wire = (self.client_p50, self.wire_p50) if which == "p50" else (self.client_p99, self.wire_p99)
        return (client - wire) / wire if wire else None


class WireAudit(BaseModel):
    """A point's wire audit. `send_us`: from the client's send stamp to its request's first byte on the wire;
    `receive_us`: from an answer's first byte on the wire to the client's stamp of it; `token_us`: the same for each
    token event (its last byte on the wire); `done_us`: for the answer's last byte. `figures`: each definition the
    client reports beside the same definition on the wire (the wire's request begins with its first byte leaving)."""

    model_config = ConfigDict(extra="forbid")

    ran: bool
    why_not: str | None = None  # the audit asked for but not run here, and why
    interface: str | None = None  # "lo", or "all" (every interface)
    scope: str | None = None  # None: every request of the point; else which of them (a sharded point: one follower's)
    packets: int = 0
    drops: int = 0  # packets the kernel could not copy to the capture (the audit is then partial)
    truncated: bool = False
    wire_requests: int = 0  # requests on the wire over the whole run (warm-up included)
    matched: int = 0  # measured requests matched to their wire request, their answers agreeing
    unmatched: int = 0  # measured requests sent but not matched (no wire request, or answers that disagree)
    unmatched_why: dict[str, int] = {}  # the unmatched ones by reason (follower/loadgen/wireaudit.py: disagreement)
    send_us: Spread | None = None
    receive_us: Spread | None = None
    done_us: Spread | None = None
    token_us: Spread | None = None
    figures: list[WireFigure] = []

    def figure(self, name: str) -> WireFigure | None:
        return next((f for f in self.figures if f.name == name), None)
