"""An uploaded prompt set for `llm.dataset: ID`: fetched once (checksum-verified, cached by sha256), parsed into rows."""

from __future__ import annotations

from pathlib import Path

from common.formats.llmdata import PromptRow, parse_lines
from common.spec.job import JobSpec
from follower.attempt.request_data import fetch_data
from follower.link.leader_client import LeaderClient


def resolve_prompt_set(spec: JobSpec, *, client: LeaderClient | None, cache_dir: Path) -> list[PromptRow] | None:
    """The prompt set's rows the job's requests take, or None when its workload names none."""
    dataset = spec.llm.dataset if spec.llm is not None else None
    if dataset is None:
        return None
    if client is None:
        raise ValueError("an uploaded prompt set needs the leader to fetch it from")
    path, meta, _ = fetch_data(client, dataset, cache_dir)
    if meta.format != "prompts":
        raise ValueError(f"data set {dataset} is {meta.format} data, not a prompt set")
    with open(path, encoding="utf-8") as lines:
        rows, _ = parse_lines(lines)
    return rows
