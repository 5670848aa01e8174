"""The load a job puts on each of its points: the arrival pattern and its rates, durations, warm-up, the in-flight
cap, searches, traces and the stability rule; and the strict base every spec model shares."""

from __future__ import annotations

import math
import re
from typing import Annotated, Any, Literal

from pydantic import (
    BeforeValidator,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from common.base import StrictModel
from common.errors import field_errors

# Upper bounds that keep one submission from occupying a follower for days (the leader's own limits are tighter).
MAX_RATE = 100_000.0
MAX_DURATION_S = 3_600.0

_DURATION_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


def parse_duration(value: Any) -> float:
    """Turn `10s`, `500ms`, `2m`, `1h` or a bare number of seconds into seconds."""
    if isinstance(value, bool):
        raise ValueError("must be a duration such as 10s, 500ms or 2m")
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        match = _DURATION_RE.match(value)
        if match:
            return float(match.group(1)) * _UNIT_S[match.group(2)]
    raise ValueError("must be a duration such as 10s, 500ms or 2m")


Seconds = Annotated[float, BeforeValidator(parse_duration)]


Pattern = Literal["poisson", "constant", "gamma", "ramp", "step", "spike", "onoff", "trace", "closed"]


PATTERNS: tuple[str, ...] = ("poisson", "constant", "gamma", "ramp", "step", "spike", "onoff", "trace", "closed")


# Patterns whose arrivals follow a rate that changes over the run (an inhomogeneous Poisson process).
MODULATED: tuple[str, ...] = ("ramp", "step", "spike", "onoff")


MAX_TRACE_ENTRIES = 20_000


MAX_CONCURRENCY = 4096


def _check_rate_value(item: Any) -> float:
    if isinstance(item, bool) or not isinstance(item, int | float):
        raise ValueError(f"must be a number of requests per second, got {item!r}")
    if not item > 0:
        raise ValueError("must be > 0")
    if item > MAX_RATE:
        raise ValueError(f"must be <= {MAX_RATE:g}")
    return float(item)


class SearchSpec(StrictModel):
    """Search for the highest load that is valid and meets the job's SLO: the offered rate (open loop) or the number of
    users (closed loop). Both bounds are probed first (the bracket), then the bracket is narrowed until it is within
    `precision`; every probe is a full measured point (follower/point/search.py)."""

    over: Literal["rate", "concurrency"] = "rate"
    """What is searched: the offered rate in req/s (an open-loop pattern's `rate`; poisson, constant or gamma keep it
    steady) or the closed loop's users (pattern closed)."""
    low: Annotated[float, Field(gt=0, le=MAX_RATE)] = 10.0
    """The lowest load tried (default: 10 req/s, or 1 user)."""
    high: Annotated[float, Field(gt=0, le=MAX_RATE)] = 1000.0
    """The highest load tried (default: 1000 req/s, or 256 users)."""
    precision: Annotated[float, Field(gt=0, lt=1)] = 0.05
    """The resolution: stop when the bracket's (lowest failing - highest passing) / lowest failing is at most this
    (for users also when they are 1 apart). The answer then lies within it of the true limit."""
    max_steps: Annotated[int, Field(ge=1, le=20)] = 10
    """The most probes run (repeats of an uncertain probe included)."""

    def probe_duration(self, load: float, duration: float) -> float:
        """A probe's measured part: the job's duration, longer where a rate's probe would hold too few requests for a
        p99 claim (P99_MIN_SAMPLES, with 10% to spare), up to MAX_DURATION_S."""
        if self.over == "concurrency":
            return duration
        return min(max(duration, 1.1 * P99_MIN_SAMPLES / load), MAX_DURATION_S)

    @model_validator(mode="before")
    @classmethod
    def _user_defaults(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("over") == "concurrency":
            return {"low": 1, "high": 256, **data}
        return data

    @model_validator(mode="after")
    def _bounds(self) -> SearchSpec:
        if self.over == "concurrency" and not (
            self.low == int(self.low) and self.high == int(self.high) and self.high <= MAX_CONCURRENCY
        ):
            raise ValueError(f"search over concurrency: low and high must be whole numbers of users in [1, {MAX_CONCURRENCY}]")
        if self.low >= self.high:
            raise ValueError("search.low must be below search.high")
        return self


DEFAULT_BLOCK_TOKENS = 512  # Mooncake's published traces' block size
MAX_BLOCK_TOKENS = 65_536


class TraceRef(StrictModel):
    """A trace file uploaded as a data set of format `trace` (common.formats.traces), replayed as the arrival schedule."""

    dataset: Annotated[str, Field(pattern=r"^[A-Za-z0-9]{1,64}$")]
    """The data set's id (POST /api/v1/data)."""
    block_tokens: Annotated[int, Field(ge=1, le=MAX_BLOCK_TOKENS)] = DEFAULT_BLOCK_TOKENS
    """A Mooncake trace's block size in tokens: each of an entry's `hash_ids` is a block of this many prompt tokens, the
    same tokens wherever the id recurs (512 in Mooncake's published traces)."""


# A p99 claim at 99% confidence needs >= 459 samples (MLPerf LoadGen): a point's minimum, and a stability window's.
P99_MIN_SAMPLES = 459


MAX_WINDOW_S = 60.0


def requests_for_a_p99(pattern: str, cv: float = 1.0) -> int:
    """The requests a steady point must be due to hold P99_MIN_SAMPLES: exactly that many where the schedule's count
    is rate x duration (constant; Poisson, conditioned on its count: follower/loadgen/schedule.py); for gamma's random
    count, 3.1 standard deviations (its coefficient of variation times the square root) more, so a point falls short
    once in a thousand."""
    if pattern in ("constant", "poisson"):
        return P99_MIN_SAMPLES
    return math.ceil(P99_MIN_SAMPLES + 3.1 * cv * math.sqrt(P99_MIN_SAMPLES))


# Patterns whose rate is steady, so rate x window is what a window holds.
STEADY_PATTERNS = ("poisson", "constant", "gamma")


class Stability(StrictModel):
    """Accept a point when its last `windows` windows agree within `tolerance`; extend the run up to `max_duration`."""

    windows: Annotated[int, Field(ge=2, le=20)] = 3
    """How many of the last windows must agree."""
    tolerance: Annotated[float, Field(gt=0, lt=1)] = 0.10
    """The largest relative difference between them (0.1: 10%)."""
    max_duration: Annotated[Seconds, Field(gt=0, le=MAX_DURATION_S)] = 60.0
    """The longest the measured part is extended to, in seconds."""


class LoadSpec(StrictModel):
    """How load is offered: an open-loop arrival process (one rate, a ladder, or a search) or a closed loop."""

    pattern: Pattern = "poisson"
    """The arrival process: poisson, constant, gamma, ramp, step, spike, onoff or trace (open loops), or closed (a closed
    loop of users)."""
    search: SearchSpec | None = None
    """Search for the highest valid load (rate, or users of a closed loop) that meets the SLO, instead of fixed ones."""
    rate: Annotated[list[float] | None, Field(validate_default=True)] = None
    """Offered rates in req/s, one point each (a ladder when several); a number is one rate. Not for trace, closed or
    search."""
    duration: Annotated[Seconds, Field(gt=0, le=MAX_DURATION_S)] = 10.0
    """The measured part of each point, in seconds (after the warm-up)."""
    warmup: Annotated[Seconds, Field(ge=0, le=MAX_DURATION_S)] = 2.0
    """Load before measuring, in seconds; its answers are not counted."""
    max_concurrency: Annotated[int, Field(gt=0, le=MAX_CONCURRENCY)] | None = None
    """Requests in flight at most. Unset: the cap follows the load (Little's law: the rate times the latency seen in
    warm-up, with headroom, bounded by the follower's max_in_flight); a number: exactly that cap."""
    cap_policy: Literal["wait", "drop"] = "wait"
    """What an open-loop request due while max_concurrency are in flight does: wait (its wait counts as latency from the
    intended time) or be dropped (counted and reported, and against the achieved rate)."""
    busy_wait: bool = False
    """Open loops: spin the last 250 µs before each send (still reading answers meanwhile) on the core the follower
    gives its generator: send lag in tens of µs at any rate, that core busy between sends. A follower with no core to
    give (fewer than two) runs its usual timer, and the point says so. Unset: the timer wakes as far ahead of each send
    as its recent wake-ups were late, and spins only that."""
    cv: Annotated[float, Field(gt=0, le=20)] = 1.0
    """gamma: coefficient of variation of the gaps (1 = Poisson)."""
    rate_end: Annotated[float | None, Field(validate_default=True)] = None
    """ramp/step: the rate at the end."""
    steps: Annotated[int, Field(ge=1, le=100)] = 4
    """step: how many equal steps from rate to rate_end."""
    spike_rate: Annotated[float | None, Field(validate_default=True)] = None
    """spike: the rate during the spike."""
    spike_at: Annotated[Seconds, Field(ge=0, le=MAX_DURATION_S)] | None = None
    """spike: when the spike starts, in seconds into the run; unset: the middle of the run."""
    spike_duration: Annotated[Seconds, Field(gt=0, le=MAX_DURATION_S)] = 1.0
    """spike: how long the spike lasts."""
    on: Annotated[Seconds, Field(gt=0, le=MAX_DURATION_S)] = 1.0
    """onoff: seconds of sending at `rate`, then `off` seconds of silence, repeated."""
    off: Annotated[Seconds, Field(gt=0, le=MAX_DURATION_S)] = 1.0
    """onoff: seconds of silence after each `on`."""
    trace: Annotated[list[float] | TraceRef | None, Field(validate_default=True)] = None
    """trace: send offsets in seconds inline, or {dataset: ID} naming an uploaded trace file (checked at submission)."""
    concurrency: Annotated[list[int] | None, Field(validate_default=True)] = None
    """closed: users, each sending its next request when its last is answered; a list is a ladder of points."""
    window: Annotated[Seconds, Field(gt=0, le=MAX_WINDOW_S)] = 1.0
    """The measurement window in seconds: what the stability rule compares and live progress shows."""
    stability: Stability | None = None
    """Run each point until its last windows agree (see Stability), up to its max_duration."""
    allow_short: bool = False
    """Run a point too short to hold a p99 claim anyway (fewer than the 459 requests a p99 needs are due in it): it is
    refused at submission otherwise, naming the shortest duration that would do; run anyway, it is marked invalid."""

    def refuses_sessions(self, target: Any = None, from_trace: bool = False) -> str | None:
        """Why LLM sessions (`from_trace`: a session trace's) cannot run under this load (they arrive open loop and
        run their turns closed loop within themselves) against `target` (a TargetSpec or None), or None."""
        if from_trace and not (self.pattern == "trace" and isinstance(self.trace, TraceRef)):
            return "llm.sessions.from_trace replays an uploaded session trace: load.pattern trace, trace: {dataset: ID}"
        if self.pattern == "closed" or self.search is not None or self.stability is not None:
            return "llm.sessions arrive open loop at load.rate (sessions/s): not with closed, load.search or load.stability"
        if target is not None and target.shards.count != 1:
            return "llm.sessions run on one follower: not with target.shards"
        return None

    def p99_shortfall(self, per_arrival: float = 1.0) -> str | None:
        """Why this load's points cannot hold a p99 claim, and the shortest duration that would (None: they can, or
        it cannot be known before the run, or allow_short asks for them anyway). A steady open loop's point holds rate
        x duration requests on average (`per_arrival` requests each arrival brings: a session's turns); a Poisson
        count varies by its square root. Stability's windows hold them each. Checked at submission, not on stored
        specs."""
        if self.allow_short or self.pattern not in STEADY_PATTERNS or not self.rate or self.stability is not None:
            return None
        rate = min(self.rate) * per_arrival
        needed = requests_for_a_p99(self.pattern, self.cv)
        if rate * self.duration >= needed:
            return None
        shortest = math.ceil(10 * needed / rate) / 10
        fix = (
            f"set load.duration to at least {shortest:g} s"
            if shortest <= MAX_DURATION_S
            else f"raise the rate to at least {math.ceil(needed / MAX_DURATION_S)} req/s"
        )
        sure = "" if needed == P99_MIN_SAMPLES else f"; {needed} due makes that sure at this cv"
        return (
            f"{self.duration:g} s at {rate:g} req/s holds about {rate * self.duration:.0f} requests, too few for a p99 (it "
            f"needs {P99_MIN_SAMPLES} answered{sure}): {fix}, or set load.allow_short: true to run it anyway (its "
            "points will be invalid)"
        )

    @field_validator("busy_wait")
    @classmethod
    def _check_busy_wait(cls, value: bool, info: ValidationInfo) -> bool:
        if value and info.data.get("pattern") == "closed":
            raise ValueError("times an open loop's sends; a closed loop sends each request when the last is answered")
        return value

    @field_validator("stability")
    @classmethod
    def _check_stability_windows(cls, value: Stability | None, info: ValidationInfo) -> Stability | None:
        # The rule compares the windows' p99s: a window too small to hold a p99 claim compares its largest few
        # answers, which never agree, so the point would run to max_duration and be called unstable.
        rates, window = info.data.get("rate"), info.data.get("window")
        if value is None or info.data.get("pattern") not in STEADY_PATTERNS or not rates or not window:
            return value
        rate = min(rates)
        if rate * window < P99_MIN_SAMPLES:
            needed = math.ceil(10 * P99_MIN_SAMPLES / rate) / 10
            fix = (
                f"set load.window to at least {needed:g} s (or a higher rate)"
                if needed <= MAX_WINDOW_S
                else f"windows are at most {MAX_WINDOW_S:g} s, so the rate must be at least "
                f"{math.ceil(P99_MIN_SAMPLES / MAX_WINDOW_S)} req/s (or drop load.stability)"
            )
            raise ValueError(
                f"a {window:g} s window at {rate:g} req/s holds ~{rate * window:.0f} requests; comparing p99s between "
                f"windows needs >= {P99_MIN_SAMPLES} each: {fix}"
            )
        return value

    @field_validator("rate", mode="before")
    @classmethod
    def _check_rate(cls, value: Any, info: ValidationInfo) -> list[float] | None:
        pattern, search = info.data.get("pattern"), info.data.get("search")
        if value is None:
            if pattern in ("trace", "closed") or search is not None:
                return None
            raise ValueError(f"field required for pattern {pattern!r}")
        if pattern in ("trace", "closed"):
            raise ValueError(f"must not be given for pattern {pattern!r}")
        if search is not None:
            raise ValueError("must not be given with search (the search chooses the rate)")
        values = value if isinstance(value, list) else [value]
        if not values:
            raise ValueError("must name at least one rate")
        out = [_check_rate_value(item) for item in values]
        if len(set(out)) != len(out):
            raise ValueError("must not repeat an entry")
        return out

    @field_validator("rate_end", mode="before")
    @classmethod
    def _check_rate_end(cls, value: Any, info: ValidationInfo) -> float | None:
        pattern = info.data.get("pattern")
        if value is None:
            if pattern in ("ramp", "step"):
                raise ValueError(f"field required for pattern {pattern!r}")
            return None
        return _check_rate_value(value)

    @field_validator("spike_rate", mode="before")
    @classmethod
    def _check_spike_rate(cls, value: Any, info: ValidationInfo) -> float | None:
        if value is None:
            if info.data.get("pattern") == "spike":
                raise ValueError("field required for pattern 'spike'")
            return None
        return _check_rate_value(value)

    @field_validator("trace", mode="before")
    @classmethod
    def _check_trace(cls, value: Any, info: ValidationInfo) -> Any:
        if value is None:
            if info.data.get("pattern") == "trace":
                raise ValueError("field required for pattern 'trace' (send offsets in seconds, or {dataset: ID})")
            return None
        if info.data.get("pattern") != "trace":
            raise ValueError("only used with pattern 'trace'")
        if isinstance(value, TraceRef):
            return value
        if isinstance(value, dict):  # an uploaded trace file, by its data set's id
            try:
                return TraceRef.model_validate(value)
            except ValidationError as exc:
                first = field_errors(exc)[0]
                raise ValueError(f"{{dataset: ID}} of an uploaded trace: {first['field']}: {first['message']}") from None
        if not isinstance(value, list) or not value:
            raise ValueError("must be a non-empty list of send offsets in seconds")
        if len(value) > MAX_TRACE_ENTRIES:
            raise ValueError(f"has {len(value)} entries; at most {MAX_TRACE_ENTRIES} are allowed")
        out: list[float] = []
        for i, item in enumerate(value):
            if isinstance(item, bool) or not isinstance(item, int | float) or not 0 <= item <= MAX_DURATION_S:
                raise ValueError(f"entries must be seconds in [0, {MAX_DURATION_S:g}], got {item!r}")
            # A trace is a recording, not a set: refused like an uploaded one (common/formats/traces.py), never sorted.
            if out and item < out[-1]:
                raise ValueError(
                    f"entry {i} ({item:g} s) is earlier than the one before ({out[-1]:g} s); offsets must never decrease"
                )
            out.append(float(item))
        return out

    @field_validator("concurrency", mode="before")
    @classmethod
    def _check_concurrency(cls, value: Any, info: ValidationInfo) -> list[int] | None:
        if value is None:
            if info.data.get("pattern") == "closed" and info.data.get("search") is None:
                raise ValueError("field required for pattern 'closed' (number of concurrent users)")
            return None
        if info.data.get("pattern") != "closed":
            raise ValueError("only used with pattern 'closed'")
        if info.data.get("search") is not None:
            raise ValueError("must not be given with search (the search chooses the users)")
        values = value if isinstance(value, list) else [value]
        if not values:
            raise ValueError("must name at least one concurrency")
        for item in values:
            if isinstance(item, bool) or not isinstance(item, int) or not 0 < item <= MAX_CONCURRENCY:
                raise ValueError(f"entries must be whole numbers in [1, {MAX_CONCURRENCY}], got {item!r}")
        if len(set(values)) != len(values):
            raise ValueError("must not repeat an entry")
        return list(values)

    @field_validator("search")
    @classmethod
    def _check_search(cls, value: SearchSpec | None, info: ValidationInfo) -> SearchSpec | None:
        pattern = info.data.get("pattern")
        if value is None:
            return value
        if value.over == "concurrency" and pattern != "closed":
            raise ValueError(f"search over concurrency needs pattern 'closed', not {pattern!r}")
        if value.over == "rate" and pattern in ("trace", "closed"):
            raise ValueError(
                f"cannot search a rate with pattern {pattern!r}: it has no rate to search (for pattern closed, search "
                "over: concurrency)"
            )
        return value

    def ladder(self) -> list[tuple[float, int | None]]:
        """(rate, concurrency) per grid entry: the rate ladder, the concurrency ladder, a trace or a search."""
        if self.search is not None:
            high = self.search.high
            return [(0.0, int(high))] if self.search.over == "concurrency" else [(high, None)]
        if self.pattern == "closed":
            return [(0.0, c) for c in self.concurrency or []]
        if isinstance(self.trace, TraceRef):
            # The file's length is known only to the leader and the follower; the follower sets the point's rate.
            return [(0.0, None)]
        if self.pattern == "trace":
            inside = [t for t in self.trace or [] if t < self.duration]
            return [(max(len(inside), 1) / self.duration, None)]
        return [(r, None) for r in self.rate or []]

    @property
    def rates(self) -> list[float]:
        """The nominal rate of each grid entry (0 for closed loop)."""
        return [rate for rate, _ in self.ladder()]

    @property
    def max_run_s(self) -> float:
        """The longest one measured run can last (the stability cap, else the duration)."""
        return max(self.duration, self.stability.max_duration) if self.stability else self.duration
