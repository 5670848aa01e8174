"""Fleet checks: one fixed benchmark pinned to every follower of a hardware class, then the outlier tests
(anomalies.py) across them and against each follower's earlier checks; outliers are marked on the follower (and
drained, where the leader's settings say so).

A check is settled once every one of its jobs has ended (on each job's finish or cancel, and when it is read), by a
conditional update, so it is settled once however many of those race.

An outlier must repeat before it is marked: followers that run a check share the leader, the database and sometimes a
host, and a burst on any of them can slow one follower's point for its few seconds. So the suspects of the first round
are run once more, alone (one pinned job each, the same benchmark), and only a suspect still an outlier with its re-run
figure in place of its first is marked. Marking (and, with the drain setting, draining) a machine is the check's
consequence; one noisy point should not be enough for it.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

from pymongo.asynchronous.database import AsyncDatabase

from common.errors import InvalidRequest, NotFound
from common.spec.job import JobSpec
from common.wire.analysis import Anomaly, FleetCheckView, HistoryOutlier, OutlierResponse
from common.wire.jobs import TERMINAL_STATES, JobState
from common.wire.models import ModelMeta
from leader.analysis import anomalies
from leader.analysis.compare import point_key
from leader.clock import utcnow
from leader.jobplan import plan_job
from leader.placement.pins import pinned
from leader.store import assignments as assignments_store
from leader.store import fleetchecks as store
from leader.store import followers as followers_store
from leader.store import jobs as jobs_store
from leader.store import leaderboard as leaderboard_store
from leader.store import models as models_store
from leader.store import results as results_store

log = logging.getLogger(__name__)

PREFIX = "fleetcheck-"  # the name of every fleet check job: fleetcheck-<check id>
METRIC = "p50_ms"  # a fixed light load: the median is the machine's service time, and steadier than a tail
HISTORY = 20  # earlier checks of the same model read for each follower's history
DRAINED_REASON = "follower {follower_id} drained: anomalous in a fleet check"


def check_spec(check_id: str, model_ref: str, follower_id: str, *, rate: float, duration_s: float) -> JobSpec:
    """The canonical benchmark, the same on every follower: the model on ONNX Runtime at batch 1, a constant light
    rate, a fixed seed, pinned to the follower."""
    spec = JobSpec.model_validate(
        {
            "name": f"{PREFIX}{check_id}",
            "model": {"ref": model_ref},
            "backends": ["onnxruntime"],
            "batch_sizes": [1],
            "load": {"pattern": "constant", "rate": rate, "duration": f"{duration_s:g}s", "warmup": "2s"},
            "seed": 0,
        }
    )
    return pinned(spec, follower_id)


def _matches(doc: dict[str, Any], hardware: str | None) -> bool:
    info = doc["info"]
    if "onnxruntime" not in info.get("backends", []):
        return False
    if hardware is None:
        return True
    names = [info.get("cpu_model", "")] + [g.get("name", "") for g in info.get("gpus") or []]
    return any(hardware.lower() in name.lower() for name in names)


async def create(
    db: AsyncDatabase, *, model: ModelMeta, hardware: str | None, rate: float, duration_s: float, owner: str
) -> FleetCheckView:
    """One pinned job per available follower of the class (ONNX Runtime offered); InvalidRequest naming `hardware` when
    fewer than MIN_FOLLOWERS match."""
    followers = await followers_store.available_docs(db)
    chosen = sorted(doc["_id"] for doc in followers if _matches(doc, hardware))
    if len(chosen) < anomalies.MIN_FOLLOWERS:
        where = f"matching {hardware!r}" if hardware else "available"
        raise InvalidRequest(
            f"a fleet check needs at least {anomalies.MIN_FOLLOWERS} followers {where} with onnxruntime; found {len(chosen)}",
            field="hardware",
        )
    check_id = uuid.uuid4().hex[:12]
    jobs = {}
    for follower_id in chosen:
        plan = plan_job(check_spec(check_id, model.ref, follower_id, rate=rate, duration_s=duration_s))
        jobs[follower_id] = (await jobs_store.insert_job(db, plan=plan, model=model, owner=owner)).id
    doc = {
        "_id": check_id,
        "created_at": utcnow(),
        "model_ref": model.ref,
        "hardware": hardware,
        "jobs": jobs,
        "state": "running",
    }
    await store.insert(db, doc)
    return _view(doc)


def _view(doc: dict[str, Any]) -> FleetCheckView:
    result = doc.get("result") or {}
    return FleetCheckView(
        id=doc["_id"],
        created_at=doc["created_at"],
        model_ref=doc["model_ref"],
        hardware=doc.get("hardware"),
        jobs=doc["jobs"],
        recheck=doc.get("recheck") or {},
        state=doc["state"],
        **result,
    )


async def get(db: AsyncDatabase, *, check_id: str, drain: bool = False) -> FleetCheckView:
    """A check, settled first if its jobs have all ended; NotFound if unknown."""
    doc = await store.find(db, check_id)
    if doc is None:
        raise NotFound(f"fleet check {check_id} does not exist", field="check_id")
    if doc["state"] == "running":
        doc = await settle(db, doc, drain=drain) or doc
    return _view(doc)


async def job_ended(db: AsyncDatabase, *, job_name: str, drain: bool) -> None:
    """A job ended: if it belongs to a fleet check, settle the check when it was the last."""
    if job_name.startswith(PREFIX):
        doc = await store.find(db, job_name[len(PREFIX) :], running=True)
        if doc is not None:
            await settle(db, doc, drain=drain)


async def _rows(db: AsyncDatabase, jobs: dict[str, str]) -> tuple[list[dict[str, Any]], dict[str, str]] | None:
    """The check's leaderboard rows (one per point of each job that succeeded) and, for each follower that gave no
    figure, why; None while a job has not ended."""
    rows: list[dict[str, Any]] = []
    missing: dict[str, str] = {}
    for follower_id, job_id in jobs.items():
        job = await jobs_store.get_job(db, job_id=job_id)
        if job.state not in TERMINAL_STATES:
            return None
        if job.state != JobState.succeeded:
            missing[follower_id] = f"its job {job_id} {job.state.value}" + (f": {job.error}" if job.error else "")
            continue
        mine = [row for row in await leaderboard_store.job_rows(db, job_id=job_id) if row.get(METRIC) is not None]
        if not mine:
            points = await results_store.job_points(db, job)
            answered = "; ".join(
                f"{p.ok} of {p.requests} requests answered" + (f", {p.errors} errors ({p.error_sample})" if p.errors else "")
                for p in points
            )
            missing[follower_id] = f"its job {job_id} succeeded without a {METRIC} figure ({answered or 'no point'})"
        rows += mine
    return rows, missing


def _tests(
    rows: list[dict[str, Any]], name: str, earlier: dict[tuple[str, str], list[float]]
) -> tuple[OutlierResponse, list[HistoryOutlier], list[str]]:
    """Both tests over the rows: across followers and against each follower's history; the followers either flags."""
    across = anomalies.across_followers(rows, name=name, metric=METRIC)
    history = anomalies.against_history({(row["follower_id"], point_key(row)): row[METRIC] for row in rows}, earlier)
    return across, history, sorted(set(across.outliers) | {h.follower_id for h in history if h.outlier})


def _confirmed(
    across: OutlierResponse, history: list[HistoryOutlier], suspects: list[str]
) -> tuple[OutlierResponse, list[HistoryOutlier], list[str]]:
    """The second round's verdicts, kept only for the first round's suspects (a follower never re-run is not marked
    for a median its neighbours' re-runs moved)."""
    points = [p.model_copy(update={"outlier": p.outlier and p.follower_id in suspects}) for p in across.points]
    history = [h.model_copy(update={"outlier": h.outlier and h.follower_id in suspects}) for h in history]
    flagged = sorted({p.follower_id for p in points if p.outlier})
    outliers = sorted(set(flagged) | {h.follower_id for h in history if h.outlier})
    return across.model_copy(update={"points": points, "outliers": flagged}), history, outliers


async def _recheck(db: AsyncDatabase, doc: dict[str, Any], suspects: list[str]) -> None:
    """Run the suspects' benchmark once more, one pinned job each (the same spec as their first); recorded on the check
    by a conditional update, and the jobs cancelled again when another caller recorded its own first."""
    jobs = {}
    for follower_id in suspects:
        first = await jobs_store.get_job(db, job_id=doc["jobs"][follower_id])
        name, version = first.model_ref.split(":", 1)
        model = await models_store.get_model(db, name=name, version=version, team=first.team)
        jobs[follower_id] = (await jobs_store.insert_job(db, plan=plan_job(first.spec), model=model, owner=first.owner)).id
    if not await store.set_recheck(db, doc["_id"], jobs=jobs):
        for job_id in jobs.values():
            await jobs_store.cancel_job(db, job_id=job_id, reason="fleet check re-run recorded by another caller")
        return
    log.info("fleet check %s: re-running %s alone before marking", doc["_id"], ", ".join(suspects))


async def settle(db: AsyncDatabase, doc: dict[str, Any], *, drain: bool) -> dict[str, Any] | None:
    """Once every job has ended: run the tests; re-run the suspects alone (first round: the outliers, and the followers
    that gave no figure), or store the result and mark (and maybe drain) the suspects still outliers or still without
    a figure (after their re-run, or when there were none). A follower that cannot run the check is never left out of
    its verdict in silence."""
    first = await _rows(db, doc["jobs"])
    if first is None:
        return None
    rows, missing = first
    earlier: dict[tuple[str, str], list[float]] = {}
    for old in await store.earlier_figures(db, model_ref=doc["model_ref"], before=doc["_id"], limit=HISTORY):
        for follower_id, key, value in old:
            earlier.setdefault((follower_id, key), []).append(value)
    name = f"{PREFIX}{doc['_id']}"
    across, history, outliers = _tests(rows, name, earlier)
    rechecked = doc.get("recheck")
    if rechecked is None and (outliers or missing):
        await _recheck(db, doc, sorted(set(outliers) | set(missing)))
        return None
    if rechecked:
        second = await _rows(db, rechecked)
        if second is None:
            return None
        again, missing = second
        suspects = sorted(rechecked)
        rows = [row for row in rows if row["follower_id"] not in set(suspects)] + again
        across, history, outliers = _confirmed(*_tests(rows, name, earlier)[:2], suspects)
    figures = [[row["follower_id"], point_key(row), row[METRIC]] for row in rows]  # (keys may hold dots: a list)
    marked = sorted(set(outliers) | set(missing))
    result = {
        "across": across.model_dump(),
        "history": [h.model_dump() for h in history],
        "outliers": marked,
        "no_figure": missing,
    }
    done = await store.settle(db, doc["_id"], result=result, figures=figures)
    if done is None:
        return await store.find(db, doc["_id"])  # settled by another caller meanwhile
    await _mark(db, doc["_id"], list(doc["jobs"]), across, history, marked, missing, drain=drain)
    return done


async def _mark(
    db: AsyncDatabase,
    check_id: str,
    followers: list[str],
    across: OutlierResponse,
    history: list[HistoryOutlier],
    outliers: list[str],
    missing: dict[str, str],
    *,
    drain: bool,
) -> None:
    """Mark each outlier, and each follower that gave no figure even alone, with its evidence (and drain it if asked);
    clear the mark of the check's other followers."""
    now = utcnow()
    for follower_id in followers:
        if follower_id not in outliers:
            await store.set_anomaly(db, follower_id=follower_id, anomaly=None)
            continue
        words = [
            f"{p.metric} {p.value_ms:.3g} ms vs class median {p.median_ms:.3g} ms ({p.deviation:+.0%}, z {p.z:.1f}) at {p.key}"
            for p in across.points
            if p.follower_id == follower_id and p.outlier
        ]
        words += [
            f"{h.value_ms:.3g} ms vs its own median {h.median_ms:.3g} ms over {len(h.history)} earlier checks "
            f"(z {h.z:.1f}) at {h.key}"
            for h in history
            if h.follower_id == follower_id and h.outlier
        ]
        if follower_id in missing:
            words.append(f"no figure in the check, run with the others and again alone: {missing[follower_id]}")
        anomaly = Anomaly(check_id=check_id, since=now, evidence="; ".join(words), drained=drain)
        await store.set_anomaly(db, follower_id=follower_id, anomaly=anomaly)
        log.warning("fleet check %s: follower %s is anomalous: %s", check_id, follower_id, anomaly.evidence)
        if drain:
            await followers_store.set_draining(db, follower_id=follower_id, draining=True)
            await assignments_store.requeue_follower_jobs(
                db, follower_ids=[follower_id], reason=DRAINED_REASON, states=[JobState.assigned.value]
            )
