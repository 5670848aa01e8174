"""A search's answer as results carry it: the load found, its interval, why the search stopped, what it noticed on
the way (a cliff, a curve that is not monotone, an uncertain boundary) and every probe with its figures."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, model_validator

Stopped = Literal["resolved", "out_of_probes", "ceiling_not_reached", "floor_fails"]

STOPPED_TEXT: dict[str, str] = {
    "resolved": "resolved to the asked precision",
    "out_of_probes": "stopped short: out of probes before the asked precision",
    "ceiling_not_reached": "the ceiling was not reached: the highest load tried passed",
    "floor_fails": "the floor fails: the lowest load tried did not pass",
}


class SearchProbe(BaseModel):
    """One probe: a full measured run at one load, its figures against the criterion, and the verdict at that load."""

    model_config = ConfigDict(extra="forbid")

    load: float  # req/s (over: rate) or users (over: concurrency)
    seed: int = 0
    valid: bool
    passed: bool  # the verdict at this load: valid and meeting the criterion (a repeated load's pooled verdict)
    margin: float | None = None  # the criterion's signed distance from its limit, as a share of it (> 0 passes)
    achieved_rate: float = 0.0
    p99_ms: float | None = None
    p99_ci_ms: tuple[float, float] | None = None
    attainment: float | None = None  # the share of requests meeting every per-request limit (a language model's)
    attainment_ci: tuple[float, float] | None = None
    uncertain: bool = False  # its 95% interval straddled the limit: one schedule's luck could decide it
    repeat: bool = False  # a second run at the same load with a new seed, after an uncertain first
    pooled: bool = False  # decided by both runs at this load together (histograms merged, counts summed)
    reasons: list[str] = []  # why the run is invalid
    # Before it (every probe after the first): how long the server took to work off the previous probe's backlog,
    # answering one request at a time until one came back at its idle time (follower/point/idle.py).
    drain_s: float | None = None
    drained: bool = True  # False: it had not within the bound, and this probe is invalid (backlog)


class SearchAnswer(BaseModel):
    """What a search found: the highest passing load below every failing one, the lowest failing load above it, how
    it stopped and every probe in the order run."""

    model_config = ConfigDict(extra="forbid")

    over: Literal["rate", "concurrency"] = "rate"
    criterion: str  # in words: "p99 <= 20 ms", "attainment >= 0.95 of ttft <= 500 ms, tpot <= 50 ms"
    found: float | None  # the highest passing load below every failing one (None: none passed)
    lowest_fail: float | None  # the lowest failing load above it (None: none failed)
    precision: float  # the resolution asked
    width: float | None = None  # the bracket's (lowest_fail - found) / lowest_fail at the end
    # Where the limit lies with each probe's sampling uncertainty (not only the bracket): the highest load whose
    # verdict passed with its whole 95% interval inside the limit, and the lowest above it that failed with its whole
    # interval outside (None: no such load was measured, below the floor or above the ceiling).
    limit_low: float | None = None
    limit_high: float | None = None
    stopped: Stopped
    cliff: bool = False  # the criterion went from comfortably met to missed within one resolution step
    monotone: bool = True  # False: a load passed above one that failed
    notes: list[str] = []  # sentences a user reads: the cliff, the non-monotone probes, an uncertain boundary
    chosen: int | None = None  # the probe whose run is the point's figures and records
    probes: list[SearchProbe]

    @property
    def unit(self) -> str:
        return "users" if self.over == "concurrency" else "req/s"

    def summary(self) -> str:
        """One line: the answer with its interval, and how the search stopped."""
        unit = self.unit
        if self.found is None:
            answer = f"no load passed (lowest tried {min(p.load for p in self.probes):g} {unit})"
        elif self.lowest_fail is None:
            answer = f">= {self.found:g} {unit}"
        else:
            answer = f"{self.found:g} {unit} (fails at {self.lowest_fail:g})"
        return f"{answer}, {self.criterion}; {len(self.probes)} probes, {STOPPED_TEXT[self.stopped]}{self._interval()}"

    def _interval(self) -> str:
        """`; with sampling error allowed for, the limit lies in [a, b] req/s` where it widens the bracket."""
        if self.found is None or (self.limit_low == self.found and self.limit_high == self.lowest_fail):
            return ""
        low = f"{self.limit_low:g}" if self.limit_low is not None else "?"
        high = f"{self.limit_high:g}" if self.limit_high is not None else "?"
        return f"; with sampling error allowed for, the limit lies in [{low}, {high}] {self.unit}"

    @model_validator(mode="before")
    @classmethod
    def _from_steps(cls, data: Any) -> Any:
        """Results stored before answers existed carry a list of steps ({rate, valid, slo_met, p99_ms}): read them as
        an answer over rate (the stored figures, no interval or margins were kept)."""
        if not isinstance(data, list) or not all(isinstance(s, dict) and {"rate", "valid"} <= s.keys() for s in data):
            return data  # not the old form: validated as it is (a list of anything else is refused, naming the field)
        probes = [
            {
                "load": step["rate"],
                "valid": step["valid"],
                "passed": bool(step["valid"] and step.get("slo_met")),
                "p99_ms": step.get("p99_ms"),
                "achieved_rate": step.get("achieved_rate", 0.0),
            }
            for step in data
        ]
        passing = [p["load"] for p in probes if p["passed"]]
        found = max(passing) if passing else None
        failing = [p["load"] for p in probes if not p["passed"] and (found is None or p["load"] > found)]
        stopped = "floor_fails" if found is None else ("ceiling_not_reached" if not failing else "resolved")
        return {
            "criterion": "the SLO (stored before searches kept their criterion)",
            "found": found,
            "lowest_fail": min(failing) if failing else None,
            "precision": 0.05,
            "stopped": stopped,
            "probes": probes,
        }
