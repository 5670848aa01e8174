"""Job documents and the domain objects made from them: the one mapper between PerfDB rows and typed jobs."""

from __future__ import annotations

import copy
from collections import OrderedDict
from typing import Any

from common.spec.grid import overload_allowance_s
from common.spec.job import JobSpec
from common.spec.needs import placement_backends
from common.wire.jobs import JobState, JobTask, JobView, StateChange
from common.wire.models import ModelMeta
from leader.clock import as_utc, utcnow
from leader.domain import JobChange, Needs, QueuedJob
from leader.lifecycle import Change, Job


def history_entry(state: JobState, attempt: int, *, reason: str | None = None, follower_id: str | None = None) -> dict[str, Any]:
    """The history entry a transition appends."""
    return StateChange(state=state, at=utcnow(), attempt=attempt, reason=reason, follower_id=follower_id).model_dump()


# What the lifecycle reads of a job (leader/lifecycle.py's Job).
LIFECYCLE_FIELDS = {
    key: 1
    for key in (
        "state",
        "attempt",
        "follower_id",
        "dispatched",
        "error",
        "part_of",
        "parts",
        "shard",
        "shards",
        "points_total",
        "history",
        "lost_to",
    )
}


def lifecycle_job(doc: dict[str, Any]) -> Job:
    """A job document (at least LIFECYCLE_FIELDS) as the lifecycle reads it; the attempt's start from its history."""
    attempt = int(doc["attempt"])
    started = [h["at"] for h in doc.get("history") or () if h["state"] == JobState.running.value and h["attempt"] == attempt]
    shard = doc.get("shard") or {}
    return Job(
        job_id=doc["_id"],
        state=JobState(doc["state"]),
        attempt=attempt,
        follower_id=doc.get("follower_id"),
        dispatched=bool(doc.get("dispatched", False)),
        error=doc.get("error"),
        part_of=doc.get("part_of"),
        parts=tuple(doc.get("parts") or ()),
        shards=int(doc.get("shards") or 0),
        shard_index=shard.get("index"),
        points=int(doc.get("points_total") or 0),
        started_at=as_utc(started[-1]) if started else None,
        lost_to=tuple(doc.get("lost_to") or ()),
    )


def change_filter(change: Change) -> dict[str, Any]:
    """The condition a Change is written under: its guard, by _id."""
    guard = change.guard
    query: dict[str, Any] = {"_id": change.job_id, "state": guard.state.value, "attempt": guard.attempt}
    if guard.check_follower:
        query["follower_id"] = guard.follower_id
    if guard.dispatched is not None:
        query["dispatched"] = guard.dispatched
    return query


def change_fields(change: Change, now: Any) -> dict[str, Any]:
    """The fields a Change sets (its state, attempt and last transition time among them)."""
    return {"state": change.state.value, "attempt": change.attempt, "updated_at": now, **change.fields}


def change_update(change: Change) -> dict[str, Any]:
    """A Change as one update: its fields set and its history entry appended."""
    return {"$set": change_fields(change, change.entry.at), "$push": {"history": change.entry.model_dump()}}


def applied(doc: dict[str, Any], change: Change) -> dict[str, Any]:
    """The document as a written Change leaves it."""
    return {**doc, **change_fields(change, change.entry.at), "history": [*doc.get("history", []), change.entry.model_dump()]}


# Each job's spec as last validated, with the stored document it was made from: validating a spec (its grid, its load's
# rates) was most of what a page of the jobs list cost the leader, and a job's spec is written once. Reused only when
# the stored spec is equal, so a changed one (a pin) is validated again.
_SPECS: OrderedDict[str, tuple[tuple[dict[str, Any], int], JobSpec, float]] = OrderedDict()
MAX_SPECS = 4096


def _spec(doc: dict[str, Any]) -> tuple[JobSpec, float]:
    """The document's spec, validated, and its overload allowance for the job's points (overload_allowance_s)."""
    made_from = (doc["spec"], int(doc["points_total"]))
    kept = _SPECS.get(doc["_id"])
    if kept is not None and kept[0] == made_from:
        _SPECS.move_to_end(doc["_id"])
        return kept[1], kept[2]
    spec = JobSpec.model_validate(doc["spec"])
    allowance = overload_allowance_s(spec, doc["points_total"])
    _SPECS[doc["_id"]] = (copy.deepcopy(made_from), spec, allowance)
    if len(_SPECS) > MAX_SPECS:
        _SPECS.popitem(last=False)
    return spec, allowance


def job_view(doc: dict[str, Any]) -> JobView:
    """A stored job document as the API shows it (datetimes made UTC-aware)."""
    history = [StateChange.model_validate({**entry, "at": as_utc(entry["at"])}) for entry in doc["history"]]
    spec, allowance = _spec(doc)
    return JobView(
        id=doc["_id"],
        name=doc["name"],
        state=doc["state"],
        attempt=doc["attempt"],
        follower_id=doc.get("follower_id"),
        spec=spec,
        model_ref=doc["model_ref"],
        points_total=doc["points_total"],
        points_done=doc["points_done"],
        estimate_s=doc["estimate_s"],
        estimate_max_s=round(doc["estimate_s"] + allowance, 3),
        estimate_spread_s=doc.get("estimate_spread_s"),
        created_at=as_utc(doc["created_at"]),
        updated_at=as_utc(doc["updated_at"]),
        error=doc.get("error"),
        history=history,
        owner=doc["owner"],
        team=doc["team"],
        waiting_reason=doc.get("waiting_reason"),
        actual_s=doc.get("actual_s"),
        parts=doc.get("parts") or [],
        part_of=doc.get("part_of"),
        part_start=doc.get("part_start"),
        records_expired_at=as_utc(doc["records_expired_at"]) if doc.get("records_expired_at") else None,
        traceparent=doc.get("traceparent"),
        colocated_refs=[f"{m['name']}:{m['version']}" for m in doc.get("colocated_models") or []],
        kind=doc.get("kind", "benchmark"),
        imported=doc.get("imported"),
    )


def job_task(doc: dict[str, Any]) -> JobTask:
    """The Celery payload for the job's current attempt."""

    def meta(snapshot: dict[str, Any]) -> ModelMeta:
        return ModelMeta.model_validate({**snapshot, "created_at": as_utc(snapshot["created_at"])})

    return JobTask(
        job_id=doc["_id"],
        attempt=doc["attempt"],
        spec=JobSpec.model_validate(doc["spec"]),
        points=doc["points"],
        model=meta(doc["model"]),
        colocated=[meta(m) for m in doc.get("colocated_models") or []],
        estimate_s=doc["estimate_s"],
        shard=doc.get("shard"),
        traceparent=doc.get("traceparent"),
    )


# What the placer's book keeps of a job (leader/placement/book.py).
BOOK_FIELDS = {
    key: 1
    for key in (
        "state",
        "attempt",
        "follower_id",
        "dispatched",
        "estimate_s",
        "base_estimate_s",
        "created_at",
        "updated_at",
        "spec.backends",
        "spec.requires",
        "spec.network",
        "spec.priority",
        "team",
        "waiting_reason",
        "model_ref",
        "owner",
        "parts",
        "part_of",
        "measured_s",
        "model.trusted",
    )
}


def queued_job(doc: dict[str, Any]) -> QueuedJob:
    """A job document (at least BOOK_FIELDS) as placement sees a queued job."""
    spec = doc.get("spec") or {}
    requires = spec.get("requires") or {}  # labels as sorted (name, value) pairs: a job's needs stay hashable
    return QueuedJob(
        doc["_id"],
        int(doc["attempt"]),
        placement_backends(
            spec.get("backends") or (), trusted=bool((doc.get("model") or {}).get("trusted")), network=spec.get("network")
        ),
        float(doc.get("base_estimate_s", doc.get("estimate_s", 0.0))),
        Needs(**{**requires, "labels": tuple(sorted((requires.get("labels") or {}).items()))}),
        doc.get("waiting_reason"),
        model_ref=str(doc.get("model_ref", "")),
        part_of=doc.get("part_of"),
        measured_s=doc.get("measured_s"),
        team=str(doc.get("team") or ""),
        priority=str(spec.get("priority") or "normal"),
    )


def job_change(doc: dict[str, Any]) -> JobChange:
    """A job document (at least BOOK_FIELDS) as the placer's book applies it (its time as the UTC it is)."""
    return JobChange(
        job_id=doc["_id"],
        state=str(doc.get("state")),
        created_at=as_utc(doc["created_at"]),
        owner=str(doc["owner"]),
        split=bool(doc.get("parts")),
        follower_id=doc.get("follower_id"),
        estimate_s=float(doc.get("estimate_s", 0.0)),
        dispatched=bool(doc.get("dispatched", True)),
        part_of=doc.get("part_of"),
        queued=queued_job(doc),
    )
