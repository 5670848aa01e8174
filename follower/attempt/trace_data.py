"""An uploaded trace file for `load.trace: {dataset: ID}`: fetched once (checksum-verified, cached by sha256), parsed."""

from __future__ import annotations

from pathlib import Path

from common.formats.traces import Trace, load_trace
from common.spec.job import JobSpec
from common.spec.load import TraceRef
from follower.attempt.request_data import fetch_data
from follower.link.leader_client import LeaderClient


def resolve_trace(spec: JobSpec, *, client: LeaderClient | None, cache_dir: Path) -> Trace | None:
    """The trace file the job replays, or None when its load names no uploaded trace."""
    ref = spec.load.trace
    if not isinstance(ref, TraceRef):
        return None
    if client is None:
        raise ValueError("an uploaded trace needs the leader to fetch it from")
    path, meta, _ = fetch_data(client, ref.dataset, cache_dir)
    if meta.format != "trace":
        raise ValueError(f"data set {ref.dataset} is {meta.format} request data, not a trace")
    return load_trace(str(path))
