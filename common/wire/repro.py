"""The reproducibility record: what decides a point's number (its configuration hash), and whether two results can be
compared (the same configuration, measured on the same kind of environment), naming what differs."""

from __future__ import annotations

import hashlib
import json

from pydantic import BaseModel, ConfigDict

from common.spec.job import PointSpec
from common.wire.results import Environment, PointResult

# A point's place in its job and its run among repeats do not decide its number (the seed draws the schedule of a run;
# two runs of one configuration differ in it and are still compared); everything else in the point does.
NOT_CONFIGURATION = frozenset({"index", "config", "repeat", "group", "seed"})

# The environment's facts that can move a number, in the order a verdict names them; the host's name, the follower's
# id and the seed do not (two hosts of one kind are compared all the time).
ENVIRONMENT_FACTS = (
    "cpu_model",
    "cpu_count",
    "cpu_governor",
    "gpus",
    "gpu_driver",
    "cuda",
    "os",
    "kernel",
    "backend_version",
    "packages",
    "image",
    "python",
    "benchfleet",
)


# Facts a result may lack (stored before the record existed, or a host without them): missing on one side is unknown,
# not a difference.
OPTIONAL_FACTS = frozenset({"cpu_governor", "gpu_driver", "cuda", "os", "kernel", "packages", "image"})


def config_hash(point: PointSpec, *, model_sha256: str, data_sha256: str | None, benchfleet: str) -> str:
    """sha256 over everything that decides the point's number: the point's spec (load, batch, server options, language
    model workload; not its place in the job nor its run's seed), the model's checksum, the request data's checksum
    and benchfleet's version; in a canonical JSON form (sorted keys), so it is the same on every host. Fields at their
    defaults are left out: a release that adds an option leaves the hash of a point that does not use it unchanged."""
    spec = point.model_dump(mode="json", exclude=set(NOT_CONFIGURATION), exclude_defaults=True)
    body = {"point": spec, "model": model_sha256, "data": data_sha256, "benchfleet": benchfleet}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


class Comparability(BaseModel):
    """Whether two results can be compared: `differs` names what is not the same (the configuration, or an environment
    fact); `unknown` what one of them does not record (a result stored before the record existed)."""

    model_config = ConfigDict(extra="forbid")

    comparable: bool
    differs: list[str] = []
    unknown: list[str] = []

    def verdict(self) -> str:
        if self.comparable:
            unknown = f" (not recorded: {', '.join(self.unknown)})" if self.unknown else ""
            return "comparable" + unknown
        return "not comparable: " + ", ".join(self.differs)


def environment_differences(a: Environment, b: Environment) -> tuple[list[str], list[str]]:
    """The environment facts that differ between two results, and those one of them does not record."""
    differs, unknown = [], []
    for name in ENVIRONMENT_FACTS:
        left, right = getattr(a, name), getattr(b, name)
        if left == right:
            continue
        if name in OPTIONAL_FACTS and (left in (None, {}) or right in (None, {})):
            unknown.append(name)  # recorded by one only: an older result, or a host without it (no cpufreq, no GPU)
        else:
            differs.append(name)
    return differs, unknown


def comparable(a: PointResult, b: PointResult) -> Comparability:
    """Whether two points' numbers can be compared, and what differs."""
    return comparable_environments(a.environment, b.environment)


def comparable_environments(a: Environment, b: Environment) -> Comparability:
    """Whether two points' numbers can be compared, from their records (configuration hash and environment)."""
    differs, unknown = environment_differences(a, b)
    ha, hb = a.config_hash, b.config_hash
    if ha is None or hb is None:
        unknown.insert(0, "configuration")
    elif ha != hb:
        differs.insert(0, "configuration")
    return Comparability(comparable=not differs, differs=differs, unknown=unknown)
