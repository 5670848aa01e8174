"""The console: the jobs list and the fleet, with the actions a role allows (cancel, re-run, copy as YAML, drain).

Pages read the stores (never the API's routes). Their actions are the API's own routes, called by the page's script
(static/console.js) with the session's CSRF token (leader/api/deps.py): the browser gets the API's answers and
refusals verbatim, and a role may do in the browser exactly what it may do over the API.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from statistics import median
from typing import Any

import yaml
from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, PlainTextResponse, Response
from pydantic import ValidationError

from common.errors import Conflict, InvalidRequest, NotFound
from common.wire.followers import FollowerView
from common.wire.imports import TOOL_NAMES
from common.wire.jobs import TERMINAL_STATES, JobFilter, JobState, JobView, as_ran
from leader.api import conditional, deps, paging
from leader.clock import as_utc, utcnow
from leader.placement.queueinfo import QueueInfo
from leader.store import fleetchecks as fleetchecks_store
from leader.store import followers as followers_store
from leader.store import joblist
from leader.store import jobs as jobs_store
from leader.store import leaderboard as leaderboard_store
from leader.store import usage as usage_store
from leader.store.leaderboard import PointTally
from leader.web.login import require_login
from leader.web.render import render

router = APIRouter(include_in_schema=False)

PAGE, MAX_PAGE = 50, 500
FILTERS = ("limit", "team", "state", "owner", "model", "backend", "follower_id", "since")
CHECKS_SHOWN = 10  # fleet checks per follower on the fleet page
USE_SHOWN = timedelta(days=30)  # the fleet page's accounting: the teams' use over this much


@dataclass(frozen=True)
class JobRow:
    """A job as the jobs list shows it: where it is, when it starts and ends (estimated until it has), its verdict."""

    job: JobView
    where: str
    start: datetime | None
    end: datetime | None
    estimated: bool  # start and end are estimates (it has not started, or not ended)
    verdict: str
    may_cancel: bool


def _verdict(job: JobView, tally: PointTally | None) -> str:
    if job.imported is not None:
        return f"imported from {TOOL_NAMES[job.imported.tool]}: {job.points_total} points, not judged"
    if job.state == JobState.succeeded:
        t = tally or PointTally()
        return f"{t.valid}/{t.points} points valid, {t.slo_met} within the SLO"
    if job.state in TERMINAL_STATES:
        return f"{job.state.value}: {job.error}" if job.error else job.state.value
    return job.waiting_reason or ""


def job_row(job: JobView, tally: PointTally | None, *, may_cancel: bool) -> JobRow:
    """Where the job is and when it runs: the placer's estimates while it waits, the measured times once it ran."""
    started = job.started_at()
    start: datetime | None
    end: datetime | None
    if job.imported is not None:  # measured elsewhere: where and when are the tool's, not a follower's
        where, start, end, estimated = f"{TOOL_NAMES[job.imported.tool]} (imported)", job.created_at, job.created_at, False
    elif job.state in TERMINAL_STATES:
        where, start, end, estimated = job.follower_id or "—", started, job.updated_at, False
    elif job.state == JobState.running:
        ends = started + timedelta(seconds=job.estimate_s) if started else None
        where, start, end, estimated = job.follower_id or "—", started, ends, True
    else:
        place = f"#{job.queue_position}" if job.queue_position else ""
        where = f"{job.follower_id} queue {place}" if job.follower_id else f"leader queue {place}"
        start = job.estimated_start
        end = start + timedelta(seconds=job.estimate_s) if start else None
        estimated = True
    cancellable = may_cancel and job.state not in TERMINAL_STATES
    return JobRow(job, where.strip(), start, end, estimated, _verdict(job, tally), cancellable)


def _page_size(raw: str | None) -> int:
    """Rows per page: `limit` when given (1 to MAX_PAGE), else PAGE."""
    if not raw:
        return PAGE
    if not raw.isdigit() or not 1 <= int(raw) <= MAX_PAGE:
        raise InvalidRequest(f"limit must be a whole number from 1 to {MAX_PAGE}", field="limit")
    return int(raw)


def _where(params: dict[str, str]) -> JobFilter:
    """The list's filters from the query string (empty inputs ignored); InvalidRequest naming the field."""
    given = {k: v.strip() for k, v in params.items() if k in FILTERS and k != "limit" and v.strip()}
    try:
        return JobFilter.model_validate(given)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = str(first["loc"][0]) if first["loc"] else "filter"
        raise InvalidRequest(f"{field}: {first['msg']}", field=field) from None


@router.get("/jobs", response_class=HTMLResponse)
async def jobs_page(request: Request) -> Response:
    """Jobs newest first, filtered (team, submitter, state, model, backend, follower, date), with where each runs or
    waits, its estimated start and end, its verdict, and cancel / re-run / copy as YAML. `fragment=1` answers the
    table's body only (the page's script refreshes it while the page is visible)."""
    principal = await require_login(request)
    resources = deps.get_resources(request)
    params = dict(request.query_params)
    fragment = params.get("fragment") == "1"
    error, status, rows, next_cursor, tag = None, 200, [], None, None
    try:
        where = _where(params)
        after = paging.decode(params.get("cursor") or None)
        limit = _page_size(params.get("limit"))
        generation = await resources.jobs_index.current(resources.db)
        if fragment:  # the rows the page's script asks for again every 3 s: 304 while nothing they show changed
            book = resources.placer.book
            placed = (book.version if book is not None else None, resources.placer.sharing.generation)
            who = (principal.user, principal.role, principal.team)
            tag = conditional.etag("rows", generation, placed, who, str(request.url.query))
            if conditional.fresh(request, tag):
                return conditional.not_modified(tag)
        jobs = await joblist.list_jobs(
            resources.db, resources.jobs_index, where=where, limit=limit, after=after, team=principal.scope, refresh=False
        )
        queue = QueueInfo(resources.db, resources.placer)
        jobs = [await queue.fill(j) for j in jobs]
        succeeded = [j.id for j in jobs if j.state == JobState.succeeded]
        tallies = await leaderboard_store.tallies(resources.db, job_ids=succeeded)
        rows = [job_row(j, tallies.get(j.id), may_cancel=principal.may_manage(j.owner)) for j in jobs]
        if len(jobs) == limit:
            next_cursor = paging.encode(jobs[-1].created_at, jobs[-1].id)
    except InvalidRequest as exc:
        error, status = exc, exc.status
    context = {"rows": rows, "principal": principal, "may_submit": principal.at_least("submitter")}
    if fragment:
        answer = HTMLResponse(render("_jobrows.html", **context), status_code=status)
        return conditional.validated(answer, tag) if tag is not None and status == 200 else answer
    filters = {k: params.get(k, "") for k in FILTERS}
    html = render(
        "jobs.html",
        csrf=request.state.csrf,
        filters=filters,
        states=[s.value for s in JobState],
        error=error,
        next_cursor=next_cursor,
        query={k: v for k, v in filters.items() if v},
        cursor=params.get("cursor", ""),
        import_tools=TOOL_NAMES,
        **context,
    )
    return HTMLResponse(html, status_code=status)


def spec_yaml(job: JobView) -> str:
    """The job's spec as it ran (common.wire.jobs.as_ran), as YAML that submits it again: every setting, the defaults
    and the seed included (a default left out would follow a later version's default), only the unset ones left out."""
    try:
        spec = as_ran(job)
    except ValueError as exc:
        raise Conflict(str(exc), field="job_id") from None
    return yaml.safe_dump(spec.model_dump(mode="json", exclude_none=True), sort_keys=False)


@router.get("/jobs/{job_id}/spec.yaml", response_class=PlainTextResponse)
async def job_yaml(request: Request, job_id: str) -> PlainTextResponse:
    """The job as it ran, as YAML (copy as YAML; re-run submits it)."""
    principal = await require_login(request)
    job = await jobs_store.get_job(deps.get_db(request), job_id=job_id, team=principal.scope)
    return PlainTextResponse(spec_yaml(job), media_type="application/yaml")


@dataclass(frozen=True)
class FollowerRow:
    """A follower as the fleet page shows it: its view, the job it runs (with its progress), recent fleet checks."""

    view: FollowerView
    running: JobView | None
    age_s: float
    checks: list[tuple[datetime, str, float]]  # (when, model, its median of the check's metric), newest first


def _check_history(docs: list[dict[str, Any]]) -> dict[str, list[tuple[datetime, str, float]]]:
    out: dict[str, list[tuple[datetime, str, float]]] = {}
    for doc in docs:
        per: dict[str, list[float]] = {}
        for follower_id, _key, value in doc.get("figures") or []:
            per.setdefault(follower_id, []).append(float(value))
        for follower_id, values in per.items():
            out.setdefault(follower_id, []).append((doc["created_at"], doc["model_ref"], median(values)))
    return out


@router.get("/fleet", response_class=HTMLResponse)
async def fleet_page(request: Request) -> HTMLResponse:
    """Every follower: liveness, drain state, anomaly and its evidence, labels, hardware, backends, network shaping,
    clock offset, the job it runs, its queue in the order it runs it, its recent fleet-check figures; drain and resume
    for admins."""
    principal = await require_login(request)
    db = deps.get_db(request)
    followers = await followers_store.list_followers(db)
    history = _check_history(await fleetchecks_store.recent(db, limit=CHECKS_SHOWN))
    now = utcnow()
    rows = []
    for f in followers:
        running = None
        if f.running_job:
            try:
                running = await jobs_store.get_job(db, job_id=f.running_job, team=principal.scope)
            except NotFound:  # another team's job (or one just deleted): shown by its id only
                running = None
        age = (now - as_utc(f.last_seen)).total_seconds()
        rows.append(FollowerRow(f, running, age, history.get(f.info.follower_id, [])))
    settings = deps.get_settings(request)
    use = await usage_store.usage(
        db,
        since=now - USE_SHOWN,
        until=now,
        by="team",
        team=principal.scope,
        prices=settings.prices,
        currency=settings.currency,
        now=now,
    )
    return HTMLResponse(render("fleet.html", csrf=request.state.csrf, rows=rows, may_drain=principal.is_admin, use=use))
