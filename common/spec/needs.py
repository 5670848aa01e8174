"""Placement's vocabulary: what a job needs of a follower and what a follower offers, as sets of tokens (a backend,
`<backend>@trusted`, `@net:<qdisc>`, `endpoint`); a follower can run a job when it offers every token the job needs."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from common.spec.job import MODEL_CODE_BACKENDS
from common.spec.network import shaping_needs
from common.spec.target import ENDPOINT

TRUSTED_ONLY = "@trusted"  # "<backend>@trusted": a placement need that a follower without the sandbox also meets


def placement_backends(backends: Iterable[str], *, trusted: bool, network: Mapping[str, Any] | None = None) -> frozenset[str]:
    """What a job's backends need of a follower: a trusted model's code-running backends are met by
    `<backend>@trusted` (any follower offering the backend), an untrusted one's only by a sandboxing follower; a job
    with network conditions needs a follower that can shape them (NETEM, TBF)."""
    needs = {f"{b}{TRUSTED_ONLY}" if trusted and b in MODEL_CODE_BACKENDS else b for b in backends}
    return frozenset(needs | shaping_needs(network))


def offered_backends(backends: Iterable[str], trusted_only: Iterable[str], *, shaping: Iterable[str] = ()) -> frozenset[str]:
    """What a follower meets: its backends (each code-running one also for trusted models), the backends it runs
    only for trusted models (no sandbox there), the qdiscs it can shape its servers' links with ("netem", "tbf"),
    and `endpoint`: every follower can drive an endpoint it does not start."""
    names = set(backends)
    offered = names | {f"{b}{TRUSTED_ONLY}" for b in names | set(trusted_only) if b in MODEL_CODE_BACKENDS}
    return frozenset(offered | {f"@net:{q}" for q in shaping} | {ENDPOINT})
