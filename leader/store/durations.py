"""The duration estimator's history: per model / backends and follower, follower class and fleet-wide, a job's run
time as fixed cost plus a rate. A job's correction is its follower's once that holds a few jobs' history, else its
class's (followers alike, learning together), else the fleet's: the most specific level with enough history.

Every job pays a fixed cost (model fetch, server start, cold start: ~3-4 s here) and then runs for about its spec's
measured seconds (points × (warm-up + duration)). A single multiplier learned from short jobs (where the fixed cost
dominates) under-estimates long ones, so the history keeps exponentially decayed least-squares sums of
(measured seconds, actual seconds) and fits actual ≈ overhead + rate × measured. With too little spread in the
measured seconds to fit a rate (one job size seen so far), the rate is 1 and only the overhead is learned.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from pymongo.asynchronous.database import AsyncDatabase

from common.spec.grid import START_COST_S
from leader.clock import utcnow

COLLECTION = "durations"
# Weight of the older history when a new observation arrives (~1/(1-DECAY) = 5 jobs' memory): recent runs count more.
DECAY = 0.8
# Weight of the newest observation in the legacy multiplier (kept as a diagnostic beside the fit).
ALPHA = 0.3
# A factor is clamped so one pathological run (a hung server, a clock jump) cannot make an estimate absurd.
MIN_FACTOR, MAX_FACTOR = 0.1, 10.0
# The fitted rate is clamped likewise; it is fitted only when the measured seconds seen differ by this much (sd).
MIN_RATE, MAX_RATE = 0.5, 3.0
MIN_SPREAD_S, MIN_SPREAD_FRACTION = 1.0, 0.2
ANY_FOLLOWER = "*"
CLASS_PREFIX = "class:"  # a follower class's level: class:<class> where a follower id would be
# A level speaks for a job once its history weighs this much (decayed: about three jobs); until then the level with
# the most history does (the most specific of those tied).
MIN_SAMPLES = 2.0
SUMS = ("w", "sm", "sa", "smm", "sma", "saa")


def backends_key(backends: Iterable[str]) -> str:
    """A job's backends as the history keys them: sorted, comma-joined."""
    return ",".join(sorted(backends))


def _id(model_ref: str, backends: str, follower_id: str) -> str:
    return f"{model_ref}|{backends}|{follower_id}"


def _levels(follower_id: str, follower_class: str | None) -> list[str]:
    """Where a follower's history is kept and read, most specific first: itself, its class, the fleet."""
    own = [] if follower_id == ANY_FOLLOWER else [follower_id]
    return [*own, *([CLASS_PREFIX + follower_class] if follower_class else []), ANY_FOLLOWER]


@dataclass(frozen=True)
class Correction:
    """How one model/backends/follower's jobs really run: actual ≈ overhead_s + rate × measured seconds."""

    overhead_s: float | None = None  # None: no history, the spec's estimate stands
    rate: float = 1.0
    factor: float | None = None  # a legacy document's multiplier only (no sums recorded)
    samples: float = 0.0  # decayed weight of the history behind the fit
    spread_s: float | None = None  # the spread (sd) of actual around the fit: the estimate's uncertainty (None: unknown)

    def estimate(self, base_s: float, measured_s: float) -> float:
        """The corrected estimate of a job whose spec estimate is base_s, measured_s of it load (warm-up + duration)."""
        if self.overhead_s is not None:
            return round(self.overhead_s + self.rate * measured_s, 3)
        if self.factor is not None:
            return round(base_s * self.factor, 3)
        return round(base_s, 3)


def fit(sums: dict[str, float]) -> Correction:
    """Overhead and rate from decayed sums (w, Σm, Σa, Σm², Σma); a rate of 1 where the sizes seen barely differ."""
    w = float(sums.get("w", 0.0))
    if w <= 0:
        return Correction()
    mean_m, mean_a = sums["sm"] / w, sums["sa"] / w
    var_m = max(0.0, sums["smm"] / w - mean_m * mean_m)
    rate = 1.0
    if var_m**0.5 >= max(MIN_SPREAD_S, MIN_SPREAD_FRACTION * mean_m):
        rate = min(MAX_RATE, max(MIN_RATE, (sums["sma"] / w - mean_m * mean_a) / var_m))
    # The fixed cost cannot be negative: a job never finishes before its load has run.
    overhead = max(0.0, mean_a - rate * mean_m)
    spread = None
    if "saa" in sums and w > 1:  # the spread of actual - (overhead + rate x measured): var(a - rate m) around its mean
        var_a = max(0.0, sums["saa"] / w - mean_a * mean_a)
        cov = sums["sma"] / w - mean_m * mean_a
        spread = max(0.0, var_a - 2 * rate * cov + rate * rate * var_m) ** 0.5
    return Correction(overhead_s=overhead, rate=rate, samples=w, spread_s=spread)


def fold(sums: dict[str, float] | None, *, measured_s: float, actual_s: float) -> dict[str, float]:
    """The decayed sums with one more (measured, actual) observation."""
    old = {k: float((sums or {}).get(k, 0.0)) for k in SUMS}
    if sums and "saa" not in sums and old["w"] > 0:
        # Written before the spread was kept: the fit stays, its spread starts from none (Σa² as if every actual were
        # the mean) and grows with each new observation.
        old["saa"] = old["sa"] * old["sa"] / old["w"]
    obs = {
        "w": 1.0,
        "sm": measured_s,
        "sa": actual_s,
        "smm": measured_s * measured_s,
        "sma": measured_s * actual_s,
        "saa": actual_s * actual_s,
    }
    return {k: DECAY * old[k] + obs[k] for k in SUMS}


async def ensure_indexes(db: AsyncDatabase) -> None:
    """Documents are looked up by _id only."""


async def record(
    db: AsyncDatabase,
    *,
    model_ref: str,
    backends: str,
    follower_id: str,
    estimate_s: float,
    actual_s: float,
    measured_s: float | None = None,
    follower_class: str | None = None,
) -> None:
    """Fold one finished job's (measured, actual) into the follower's, its class's and the fleet-wide history."""
    if estimate_s <= 0 or actual_s <= 0:
        return
    measured = max(0.0, estimate_s - START_COST_S) if measured_s is None else measured_s
    ratio = min(MAX_FACTOR, max(MIN_FACTOR, actual_s / estimate_s))
    for fid in _levels(follower_id, follower_class):
        key = _id(model_ref, backends, fid)
        doc = await db[COLLECTION].find_one({"_id": key})
        factor = ratio if doc is None else (1 - ALPHA) * doc["factor"] + ALPHA * ratio
        sums = fold(doc.get("sums") if doc is not None else None, measured_s=measured, actual_s=actual_s)
        await db[COLLECTION].update_one(
            {"_id": key},
            {
                "$set": {
                    "factor": factor,
                    "sums": sums,
                    "last_estimate_s": estimate_s,
                    "last_measured_s": measured,
                    "last_actual_s": actual_s,
                    "updated_at": utcnow(),
                },
                "$inc": {"count": 1, "abs_error_s": abs(actual_s - estimate_s)},
            },
            upsert=True,
        )


def _correction(doc: dict[str, Any]) -> Correction:
    if doc.get("sums"):
        return fit(doc["sums"])
    return Correction(factor=float(doc["factor"]))  # written before the sums were kept


def pick(levels: list[Correction]) -> Correction:
    """Of the levels' corrections (most specific first, those with history), the first with MIN_SAMPLES of history,
    else the one with the most (the most specific of those tied), else none."""
    for level in levels:
        if level.samples >= MIN_SAMPLES:
            return level
    return max(levels, key=lambda c: c.samples, default=Correction())


async def correction(
    db: AsyncDatabase, *, model_ref: str, backends: str, follower_id: str, follower_class: str | None = None
) -> Correction:
    """The correction for this model/backends on this follower (ANY_FOLLOWER: fleet-wide), read at the most specific
    level with enough history (`pick`), else none."""
    ids = [_id(model_ref, backends, level) for level in _levels(follower_id, follower_class)]
    docs = {d["_id"]: d for d in await db[COLLECTION].find({"_id": {"$in": ids}}).to_list(len(ids))}
    return pick([_correction(docs[key]) for key in ids if key in docs])
