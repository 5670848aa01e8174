"""Which followers a leader takes. The leader/follower contract (registration, heartbeats, claims, task payloads,
reports) has a version of its own, WIRE, bumped when a change breaks it; benchfleet's release (`common.__version__`)
says which build a side runs. A leader takes a follower whose contract lies in [OLDEST_WIRE, WIRE], whatever its
release, and shows one of another release as such; any other is refused at registration with the reason (HTTP 409,
code `incompatible`, field `wire`), read before the rest of its registration so a follower of another contract is
told what to upgrade rather than which field it did not recognise."""

from __future__ import annotations

from packaging.version import InvalidVersion, Version

from common import __version__

# 1: registration names its contract. 2: a task carries its job's traceparent (a follower of 1 refuses such a task).
WIRE = 2  # this build's contract
OLDEST_WIRE = 2  # the oldest follower contract this leader still speaks


def refusal(*, version: object, wire: object) -> str | None:
    """Why a leader of this build refuses a follower of `version` speaking contract `wire` (None: it takes it)."""
    who = f"follower (benchfleet {version})" if isinstance(version, str) else "follower"
    here = f"this leader (benchfleet {__version__}) speaks contract {OLDEST_WIRE}" + (f" to {WIRE}" if OLDEST_WIRE < WIRE else "")
    if wire is None:
        return f"{who} names no contract version (a release before versioned contracts); {here}: upgrade the follower"
    if not isinstance(wire, int) or isinstance(wire, bool):
        return f"{who} names contract {wire!r}, not a number; {here}"
    if wire < OLDEST_WIRE:
        return f"{who} speaks contract {wire}, older than {here}: upgrade the follower"
    if wire > WIRE:
        return f"{who} speaks contract {wire}, newer than {here}: upgrade the leader first"
    return None


def release_note(version: str) -> str | None:
    """How a follower's release stands beside this leader's (None: the same release)."""
    if version == __version__:
        return None
    try:
        theirs, ours = Version(version), Version(__version__)
    except InvalidVersion:
        return f"release {version!r} (the leader runs {__version__}); compatible contract"
    side = "older" if theirs < ours else "newer"
    return f"{side} release {version} (the leader runs {__version__}); compatible contract"
