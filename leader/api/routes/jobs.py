"""Job routes: submission, queries and cancel for users; claim, point reports and finish for followers."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Annotated, Any, get_args

from fastapi import APIRouter, Query, Request, Response

from common import tracing
from common.errors import Conflict, Forbidden, InvalidSpec, NotFound, UnsupportedMediaType
from common.fairshare import PRIORITY_ROLES
from common.formats.datasets import DataSetMeta
from common.formats.llmdata import ANSWER, KINDS_FOR_API
from common.formats.signature import input_mismatches
from common.spec.grid import expand
from common.spec.job import LLM_BACKENDS, BackendName, JobSpec
from common.spec.llm import LlmWorkload, Sessions, api_refused_by, apis_served
from common.spec.load import TraceRef
from common.spec.parse import load_yaml, parse_spec
from common.spec.processors import processing_problem
from common.spec.quality import LABEL_FIELDS, TARGET_FIELDS
from common.tracing import fresh_traceparent
from common.wire.jobs import (
    TERMINAL_STATES,
    Claim,
    FinishReport,
    JobFilter,
    JobFootprint,
    JobResults,
    JobTask,
    JobView,
    PointReport,
    SubmitPreview,
)
from common.wire.models import LlmParams, ModelMeta
from common.wire.repeats import summarize_repeats
from leader.api import conditional, paging
from leader.api.body import read_limited
from leader.api.deps import Db, FollowerPrincipal, JobId, JobIndexDep, PlacerDep, SettingsDep, Submitter, Viewer, check_follower
from leader.auth.tokens import Principal
from leader.jobplan import JobPlan, plan_job
from leader.jobs import fleetcheck
from leader.jobs.limits import check_request_size, check_spec_limits, queue_admission
from leader.jobs.targets import target_model
from leader.placement.pins import pin_shards
from leader.placement.queueinfo import QueueInfo, preview, unplaceable
from leader.placement.shard_choice import choose_shard_followers, sized
from leader.store import assignments as assignments_store
from leader.store import datasets as data_store
from leader.store import deletion, joblist
from leader.store import followers as followers_store
from leader.store import jobs as jobs_store
from leader.store import leaderboard as leaderboard_store
from leader.store import models as models_store
from leader.store import results as results_store

router = APIRouter(prefix="/jobs", tags=["jobs"])
log = logging.getLogger(__name__)

YAML_TYPES = frozenset({"application/yaml", "text/yaml", "application/x-yaml", "text/plain"})
JSON_TYPES = frozenset({"application/json"})
MAX_LIST = 500

_SPEC_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            "application/yaml": {"schema": {"type": "string"}},
            "application/json": {"schema": {"$ref": "#/components/schemas/JobSpec"}},
        },
    }
}


def _decode(content_type: str, body: bytes) -> Any:
    if content_type in JSON_TYPES:
        try:
            return json.loads(body)
        except (ValueError, RecursionError) as exc:
            raise InvalidSpec(f"malformed JSON: {exc}", field="(body)") from None
    return load_yaml(body)


def check_llm_workload(spec: JobSpec, ref: str, llm: LlmParams) -> None:
    """What a language model's server would refuse request by request, refused at submission naming the field."""
    workload = spec.llm or LlmWorkload()
    if (server := api_refused_by(workload.api, list(spec.backends), LLM_BACKENDS)) is not None:
        raise InvalidSpec(
            f"backend {server} does not serve api {workload.api} ({server} serves {', '.join(apis_served(server))})",
            field="llm.api",
        )
    # Only a sequence classifier scores, and it does nothing else (on a server benchfleet starts from the model; a
    # target's stored model gives the client its tokenizer, the target serves what it serves).
    if spec.target is None and (workload.api == "rerank") != llm.scores:
        need = "a reranker (a sequence classifier)" if workload.api == "rerank" else "a model that generates or embeds"
        raise InvalidSpec(f"api {workload.api} needs {need}; model {ref} is a {llm.architecture}", field="llm.api")
    if workload.templated and not llm.chat_template:
        raise InvalidSpec(
            f"model {ref} has no chat template (tokenizer_config.json chat_template): use completions", field="llm.api"
        )
    longest = workload.longest_prompt + workload.output_tokens.upper
    room = spec.server.llm.model_len(llm.context_length)
    if longest > room:
        raise InvalidSpec(
            f"the longest prompt plus the longest output ({longest} tokens) exceed the {room} tokens a "
            f"sequence of {ref} may hold on the server (server.llm.max_model_len, at most its context "
            f"{llm.context_length})",
            field="llm",
        )


@dataclass(frozen=True)
class Checked:
    """A submission that passed every check: what inserting it (or previewing it) needs."""

    plan: JobPlan
    model: ModelMeta
    colocated: list[ModelMeta]


async def _checked(request: Request, db: Db, settings: SettingsDep, principal: Principal) -> Checked:
    """Every check a submission passes before it is stored (submit and preview alike): 415, 413, 422 or 404 naming the
    field otherwise."""
    content_type = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if content_type not in YAML_TYPES | JSON_TYPES:
        raise UnsupportedMediaType(
            f"Content-Type must be one of {', '.join(sorted(YAML_TYPES | JSON_TYPES))}, not {content_type or 'none'}",
            field="Content-Type",
        )
    body = await read_limited(request, settings.max_body_bytes)
    spec = parse_spec(_decode(content_type, body))
    if spec.target is not None and spec.target.shards.count == "auto":  # decided now, from the fleet (shard_choice)
        spec = sized(await followers_store.list_followers(db), spec, expand(spec))
    if principal.role not in PRIORITY_ROLES[spec.priority]:
        allowed = " and ".join(PRIORITY_ROLES[spec.priority])
        raise Forbidden(f"priority {spec.priority} is for {allowed} tokens; this one is a {principal.role}'s", field="priority")
    plan = plan_job(spec)
    check_spec_limits(plan, settings)
    # A submitter's own team's models and data only (another team's do not exist for it); an admin's any team's.
    team = principal.scope
    if spec.target is not None:  # an endpoint already running: its model need not be stored (leader/jobs/targets.py)
        model = await target_model(db, spec, team=principal.team, owner=principal.user, leader_allow=settings.egress_networks)
    else:
        model = await models_store.get_model(db, name=spec.model.name, version=spec.model.version, field="model.ref", team=team)
    check_request_size(plan, model.inputs, model.ref)
    if spec.inputs is not None and model.inputs and (problems := input_mismatches(spec.inputs, model.inputs)):
        raise InvalidSpec(f"model {model.ref} does not match: {'; '.join(problems)}", field="inputs")
    # A language model is served over an OpenAI-compatible API by an LLM server; a tensor model over KServe v2.
    wrong = [b for b in spec.backends if (b in LLM_BACKENDS) != model.is_llm and spec.target is None]
    if wrong:
        kind = "a language model (format hf)" if model.is_llm else f"a tensor model (format {model.format})"
        serve = ", ".join(b for b in get_args(BackendName) if (b in LLM_BACKENDS) == model.is_llm)
        raise InvalidSpec(f"{', '.join(wrong)} cannot serve {model.ref}, {kind}; use {serve}", field="backends")
    if model.llm is not None:
        check_llm_workload(spec, model.ref, model.llm)
    outputs = [(o.name, o.datatype, o.shape) for o in model.outputs]
    if (problem := processing_problem(spec.data, model.ref, outputs)) is not None:
        raise InvalidSpec(problem[1], field=problem[0])
    data_meta = None
    if spec.data.id is not None:
        try:
            data_meta = await data_store.get(db, data_id=spec.data.id, team=team)  # refused now, not by a follower
        except NotFound:
            raise InvalidSpec(f"data set {spec.data.id} does not exist", field="data.id") from None
        if data_meta.format == "trace":
            raise InvalidSpec(f"data set {spec.data.id} is a trace (send times), not request data", field="data.id")
        if data_meta.format == "prompts":
            raise InvalidSpec(
                f"data set {spec.data.id} is a language model's prompt set: name it in llm.dataset", field="data.id"
            )
        if spec.quality is not None and spec.quality.accuracy is not None and not set(data_meta.fields) & set(LABEL_FIELDS):
            raise InvalidSpec(
                f"data set {spec.data.id} carries no labels to score accuracy against (an npz `labels` array, or a "
                f"`label` on each JSONL row); it holds {', '.join(data_meta.fields)}",
                field="quality.accuracy",
            )
        if spec.quality is not None and spec.quality.regression and not set(data_meta.fields) & set(TARGET_FIELDS):
            raise InvalidSpec(
                f"data set {spec.data.id} carries no true values to score the answers against (an npz `targets` "
                f"array, or a `target` on each JSONL row); it holds {', '.join(data_meta.fields)}",
                field="quality.regression",
            )
    if spec.llm is not None and spec.llm.dataset is not None:
        await _check_prompt_set(db, spec.llm, team, scored=spec.quality is not None and spec.quality.evaluation is not None)
    if isinstance(spec.load.trace, TraceRef):
        await _check_trace_ref(db, spec.load.trace, data_meta, team, spec.llm.sessions if spec.llm is not None else None)
    colocated = await _colocated_models(db, spec, model, team)
    if plan.sharded:  # who drives each shard, or a refusal with the figures (leader/placement/shard_choice.py)
        plan = pin_shards(plan, choose_shard_followers(await followers_store.list_followers(db), spec, plan.points))
    return Checked(plan, model, colocated)


@router.post("", status_code=201, response_model=JobView, openapi_extra=_SPEC_BODY)
async def submit_job(request: Request, db: Db, settings: SettingsDep, placer: PlacerDep, principal: Submitter) -> JobView:
    """Submit a job spec (YAML or JSON); it is stored as queued before the reply."""
    checked = await _checked(request, db, settings, principal)
    plan, model, colocated = checked.plan, checked.model, checked.colocated
    # The cap counts what this submission creates (a split job's parts), checked and inserted under the user's lock.
    submitted: tracing.Attributes = {
        "benchfleet.model": model.ref,
        "benchfleet.points": len(plan.points),
        "benchfleet.user": principal.user,
    }
    async with queue_admission(db, settings, principal, adding=plan.jobs_created):
        with tracing.span("job.submit", attributes=submitted) as traced:  # the root of the job's trace
            job = await jobs_store.insert_job(
                db, plan=plan, model=model, owner=principal.user, colocated=colocated, traceparent=traced or fresh_traceparent()
            )
            tracing.annotate({"benchfleet.job_id": job.id})
    log.info("job %s submitted (trace %s)", job.id, job.trace_id)
    placer.nudge()
    # A job no follower can run now (a backend none offers, a GPU none has): flagged in the reply, not left to wait in
    # silence until the placer's next tick says why.
    if (why := unplaceable(await placer.fleet(), plan=plan, model=model, policy=settings.placement_policy)) is not None:
        await assignments_store.set_waiting_reasons(db, job_ids=[job.id], reason=why)
        job = job.model_copy(update={"waiting_reason": why})
    return job


@router.post("/preview", response_model=SubmitPreview, openapi_extra=_SPEC_BODY)
async def preview_job(request: Request, db: Db, settings: SettingsDep, placer: PlacerDep, principal: Submitter) -> SubmitPreview:
    """Check a job spec exactly as a submission is checked (the same 4xx naming the field), store nothing, and say what
    submitting it now would do: its points and estimate, and where placement would send it (after how many jobs, about
    when it would start), or why no follower can run it."""
    checked = await _checked(request, db, settings, principal)
    return preview(await placer.fleet(), placer.book, plan=checked.plan, model=checked.model, policy=settings.placement_policy)


async def _colocated_models(db: Db, spec: JobSpec, model: ModelMeta, team: str | None) -> list[ModelMeta]:
    """A co-location job's other models, resolved like its own: 404 naming colocate.models.K when one is missing,
    422 when it is a language model or already served (the job's own, or named twice)."""
    if spec.colocate is None:
        return []
    out: list[ModelMeta] = []
    for k, ref in enumerate(spec.colocate.models):
        name, _, version = ref.partition(":")
        other = await models_store.get_model(db, name=name, version=version or None, field=f"colocate.models.{k}", team=team)
        if other.is_llm:
            raise InvalidSpec(f"{other.ref} is a language model; colocate serves tensor models", field=f"colocate.models.{k}")
        if other.ref == model.ref or other.ref in [m.ref for m in out]:
            raise InvalidSpec(f"{other.ref} is already served in this co-location", field=f"colocate.models.{k}")
        out.append(other)
    return out


async def _check_prompt_set(db: Db, workload: LlmWorkload, team: str | None, *, scored: bool) -> None:
    """An uploaded prompt set must exist, be one, hold only rows the job's api can send, and (`scored`: the job's
    quality.evaluation scores it) an answer on every row (422 naming the field)."""
    field = "llm.dataset"
    try:
        meta = await data_store.get(db, data_id=str(workload.dataset), team=team)
    except NotFound:
        raise InvalidSpec(f"data set {workload.dataset} does not exist", field=field) from None
    if meta.format != "prompts":
        raise InvalidSpec(
            f"data set {workload.dataset} is {meta.format} data, not a prompt set (upload it with format prompts)", field=field
        )
    if wrong := [k for k in meta.fields if k not in (*KINDS_FOR_API[workload.api], ANSWER)]:
        raise InvalidSpec(
            f"prompt set {workload.dataset} holds {', '.join(wrong)} rows, which api {workload.api} cannot "
            "send (chat messages and conversations need api: chat)",
            field=field,
        )
    if scored and ANSWER not in meta.fields:
        raise InvalidSpec(
            f"prompt set {workload.dataset} has no answers to score (an `answer` on every row)", field="quality.evaluation"
        )


async def _check_trace_ref(
    db: Db, ref: TraceRef, data_meta: DataSetMeta | None, team: str | None, sessions: Sessions | None
) -> None:
    """An uploaded trace must exist, be a trace, hold sessions exactly when the job replays a session trace's (and
    no lengths of its own when sessions draw theirs), and name only rows the job's request data has (422 naming the
    field)."""
    field = "load.trace.dataset"
    try:
        meta = await data_store.get(db, data_id=ref.dataset, team=team)
    except NotFound:
        raise InvalidSpec(f"data set {ref.dataset} does not exist", field=field) from None
    if meta.format != "trace":
        raise InvalidSpec(
            f"data set {ref.dataset} is {meta.format} request data, not a trace (upload it with format trace)", field=field
        )
    holds_sessions = "session_id" in meta.fields
    if holds_sessions and (sessions is None or not sessions.from_trace):
        raise InvalidSpec(
            f"trace {ref.dataset} holds sessions (session_id): replay them with llm.sessions: {{from_trace: true}}",
            field="llm.sessions",
        )
    if sessions is not None and sessions.from_trace and not holds_sessions:
        raise InvalidSpec(f"trace {ref.dataset} holds no sessions (no session_id) for llm.sessions.from_trace", field=field)
    if sessions is not None and not sessions.from_trace and "prompt_tokens" in meta.fields:
        raise InvalidSpec(
            f"trace {ref.dataset} gives each request's lengths; llm.sessions draw their own turns (a session trace's "
            "are replayed with from_trace: true)",
            field=field,
        )
    if meta.max_input is None:
        return
    if data_meta is None:
        raise InvalidSpec(
            f"trace {ref.dataset} names request-data rows (input); give data: {{source: upload, id: ...}}", field=field
        )
    if meta.max_input >= data_meta.samples:
        raise InvalidSpec(
            f"trace {ref.dataset} names input row {meta.max_input}; data set {data_meta.id} has "
            f"{data_meta.samples} rows (0..{data_meta.samples - 1})",
            field=field,
        )


@router.get("", response_model=list[JobView], responses={304: {"description": "Not Modified: If-None-Match named its ETag"}})
async def list_jobs(
    request: Request,
    db: Db,
    index: JobIndexDep,
    viewer: Viewer,
    where: Annotated[JobFilter, Query()],
    limit: Annotated[int, Query(ge=1, le=MAX_LIST)] = 100,
    cursor: Annotated[str | None, Query(max_length=200)] = None,
) -> Response:
    """The caller's team's jobs (every team's for an admin) newest first, those the filters select (state, owner,
    model name or name:version, backend, follower, submitted since), a page of `limit` at a time: a full page names the
    next one in its `Link` (rel="next") and `X-Next-Cursor` headers (pass it back as `cursor`). Its `ETag` names this
    answer: asked again with it in `If-None-Match`, the list is 304 while no job changed (at most 10 s)."""
    after = paging.decode(cursor)
    tag = conditional.etag("jobs", await index.current(db), viewer.scope, str(request.url.query))
    if conditional.fresh(request, tag):
        return conditional.not_modified(tag)
    jobs = await joblist.list_jobs(db, index, where=where, limit=limit, after=after, team=viewer.scope, refresh=False)
    page = Response(paging.jobs_json(jobs), media_type="application/json")  # (the model's JSON, each job written once)
    paging.link_next(request, page, (jobs[-1].created_at, jobs[-1].id) if len(jobs) == limit else None)
    return conditional.validated(page, tag)


@router.get("/{job_id}/footprint", response_model=JobFootprint)
async def job_footprint(job_id: JobId, db: Db, viewer: Viewer) -> JobFootprint:
    """What the job's data holds in PerfDB, kind by kind (documents and bytes): what deleting it would remove."""
    await jobs_store.get_job(db, job_id=job_id, team=viewer.scope)
    return await deletion.footprint(db, job_id=job_id)


@router.delete("/{job_id}", response_model=JobFootprint)
async def delete_job(job_id: JobId, db: Db, principal: Submitter) -> JobFootprint:
    """Delete a finished job and all its data (results, leaderboard rows, raw records, progress, shard records; the
    audit trail keeps the deletion): only its owner or an admin (403); refused while it has not finished, for a part of
    a split job, and for a job pinned as a baseline (409, saying what to do first)."""
    job = await jobs_store.get_job(db, job_id=job_id, team=principal.scope)
    if not principal.may_manage(job.owner):
        raise Forbidden(f"job {job_id} belongs to {job.owner}; only they or an admin may delete it", field="owner")
    if job.part_of is not None:
        raise Conflict(f"job {job_id} is a part of job {job.part_of}: delete that job", field="job_id")
    if job.state not in TERMINAL_STATES:
        raise Conflict(f"job {job_id} is {job.state.value}: cancel it first, then delete it", field="state")
    if pinned := await leaderboard_store.baselines_of(db, job_id=job_id):
        raise Conflict(f"job {job_id} is pinned as baseline {', '.join(pinned)}: pin another job there first", field="job_id")
    return await deletion.footprint(db, job_id=job_id, delete=True)


@router.get("/{job_id}", response_model=JobView)
async def get_job(job_id: JobId, db: Db, placer: PlacerDep, viewer: Viewer) -> JobView:
    """One job; a waiting one with its queue position and estimated start."""
    return await QueueInfo(db, placer).fill(await jobs_store.get_job(db, job_id=job_id, team=viewer.scope))


@router.get("/{job_id}/results", response_model=JobResults)
async def get_results(job_id: JobId, db: Db, viewer: Viewer) -> JobResults:
    """The job and the point results of its current attempt, by point index."""
    job = await jobs_store.get_job(db, job_id=job_id, team=viewer.scope)
    points = await results_store.job_points(db, job)
    return JobResults(job=job, points=points, repeats=summarize_repeats(points))


@router.post("/{job_id}/cancel", response_model=JobView)
async def cancel_job(job_id: JobId, db: Db, settings: SettingsDep, principal: Submitter) -> JobView:
    """Cancel a job that has not finished (409 if it has); only its owner or an admin may (403)."""
    job = await jobs_store.get_job(db, job_id=job_id, team=principal.scope)
    if not principal.may_manage(job.owner):
        raise Forbidden(f"job {job_id} belongs to {job.owner}; only they or an admin may cancel it", field="owner")
    cancelled = await jobs_store.cancel_job(db, job_id=job_id)
    await fleetcheck.job_ended(db, job_name=cancelled.name, drain=settings.fleetcheck_drain)
    return cancelled


@router.post("/{job_id}/claim", response_model=JobTask)
async def claim_job(job_id: str, claim: Claim, db: Db, principal: FollowerPrincipal) -> JobTask:
    """A follower starts the attempt it was sent: granted once, to the current incarnation (409 otherwise)."""
    check_follower(principal, claim.follower_id)
    incarnation = await followers_store.incarnation_of(db, follower_id=claim.follower_id)
    if incarnation != claim.incarnation:
        raise Conflict(f"follower {claim.follower_id} incarnation {claim.incarnation} is not registered", field="incarnation")
    return await jobs_store.claim_job(db, job_id=job_id, claim=claim)


@router.post("/{job_id}/points", response_model=JobView)
async def report_point(job_id: str, report: PointReport, db: Db, principal: FollowerPrincipal) -> JobView:
    """Store one point of the running attempt (idempotent by point index; 409 for a stale attempt)."""
    check_follower(principal, report.follower_id)
    job = await jobs_store.running_attempt(db, job_id=job_id, attempt=report.attempt, follower_id=report.follower_id)
    if not 0 <= report.result.point.index < job.points_total:
        raise InvalidSpec(f"point index must be in [0, {job.points_total})", field="result.point.index")
    done = await results_store.save_point(db, job_id=job_id, attempt=report.attempt, result=report.result)
    await jobs_store.set_points_done(db, job_id=job_id, attempt=report.attempt, points_done=done)
    return job.model_copy(update={"points_done": done})


@router.post("/{job_id}/finish", response_model=JobView)
async def finish_job(job_id: str, report: FinishReport, db: Db, settings: SettingsDep, principal: FollowerPrincipal) -> JobView:
    """Close the running attempt as succeeded or failed (the same finish again is a no-op; 409 if stale)."""
    check_follower(principal, report.follower_id)
    job = await jobs_store.get_job(db, job_id=job_id)
    attributes: tracing.Attributes = {
        "benchfleet.job_id": job_id,
        "benchfleet.state": report.state,
        "benchfleet.attempt": report.attempt,
    }
    with tracing.span("job.finish", parent=job.traceparent, attributes=attributes):
        finished = await jobs_store.finish_job(db, job_id=job_id, report=report)
    await fleetcheck.job_ended(db, job_name=finished.name, drain=settings.fleetcheck_drain)  # the last one settles it
    return finished
