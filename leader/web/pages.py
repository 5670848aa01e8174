"""The web pages: leaderboard (with the recommender), job, point, analysis and compare, and the offline report.

Pages read analysis data (leader/analysis) and draw it (leader/web/charts.py); they never call the API's routes.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any
from urllib.parse import urlencode

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles

from common.errors import BenchfleetError, InvalidRequest, NotFound
from common.stats import ESTIMATOR
from common.wire.jobs import TERMINAL_STATES, JobFilter, JobState
from common.wire.repeats import summarize_repeats
from leader.analysis import compare as compare_mod
from leader.analysis import hardware, heatmap, interference, leaderboard, queries
from leader.analysis.boardquery import NUMERIC, column
from leader.analysis.recommend import parse_query, recommend
from leader.analysis.roofline import cost_by_hardware, roofline
from leader.api import API_PREFIX, deps
from leader.store import joblist, lookup, rowcounts
from leader.store import jobs as jobs_store
from leader.store import results as results_store
from leader.web import charts as draw
from leader.web import console, login, repository, submit
from leader.web.curves import prefill_chart
from leader.web.render import HERE, render

COLUMNS = [
    ("model", "model"),
    ("backend", "backend"),
    ("hardware", "hardware"),
    ("batch_size", "batch"),
    ("rate", "load"),
    ("p50_ms", "p50 ms"),
    ("p99_ms", "p99 ms"),
    ("throughput", "req/s"),
    ("samples_per_s", "samples/s"),
    ("valid", "validity"),
    ("cost_usd_per_1m", "cost /1M"),
    ("energy_wh_per_1m", "Wh /1M"),
]
# Shown when a row on the page is a language model's.
LLM_COLUMNS = [("ttft_p99_ms", "TTFT p99 ms"), ("tokens_per_s", "tokens/s")]
# Shown when a row on the page carries a quality check's accuracy.
QUALITY_COLUMNS = [("accuracy", "top-1 accuracy")]
HEAT_METRICS = heatmap.METRICS
HEAT_PARAMS = heatmap.PARAMS

router = APIRouter(include_in_schema=False)
require_login = login.require_login


@router.get("/")
async def home() -> Response:
    """The leaderboard is the front page."""
    return RedirectResponse("/leaderboard", status_code=303)


def _filters_from_form(params: dict[str, str]) -> tuple[list[str], dict[str, str]]:
    """`f_<column>` inputs to leaderboard filters: text exact, numbers `20`, `<20`, `>=8`."""
    filters, values = [], {}
    for key, raw in params.items():
        if not key.startswith("f_") or not raw.strip():
            continue
        col = column(key[2:], key)
        value = raw.strip()
        values[col] = value
        if col in NUMERIC and value[:1] in "<>=!":
            filters.append(f"{col}{value}")
        else:
            filters.append(f"{col}:{value}")
    return filters, values


def _float_arg(params: dict[str, str], name: str) -> float | None:
    raw = params.get(name, "").strip()
    if not raw:
        return None
    try:
        value = float(raw)
    except ValueError:
        raise InvalidRequest(f"{name} must be a number", field=name) from None
    return value


# The recommender form's number fields (common.wire.analysis.RecommendQuery).
RECOMMEND_FIELDS = (
    "p99_ms",
    "ttft_ms",
    "tpot_ms",
    "min_throughput",
    "min_samples_per_s",
    "min_tokens_per_s",
    "max_cost",
    "max_cost_per_1m_tokens",
    "min_accuracy",
    "max_accuracy_drop",
)


@router.get("/leaderboard", response_class=HTMLResponse)
async def leaderboard_page(request: Request) -> HTMLResponse:
    """Every point as a row; sortable and filterable per column; best under SLO highlighted; the recommender above."""
    team = (await require_login(request)).scope
    params = dict(request.query_params)
    db = deps.get_db(request)
    filters, values = _filters_from_form(params)
    filters += request.query_params.getlist("filter")
    sort, order = params.get("sort", "p99_ms"), params.get("order", "asc")
    offset = int(params.get("offset", "0") or 0) if params.get("offset", "0").isdigit() else 0
    page = await leaderboard.page(db, sort=sort, order=order, filters=filters, limit=50, offset=offset, team=team)
    rec_args = {k: _float_arg(params, k) for k in RECOMMEND_FIELDS}
    rec_confident = params.get("confident") == "true"
    rec, rec_error = None, None
    if any(rec_args[k] is not None for k in ("p99_ms", "ttft_ms", "tpot_ms")):
        try:
            query = parse_query({**rec_args, "confident": rec_confident, "model": params.get("model") or None})
            rec = recommend(await leaderboard.select(db, filters, team=team), query)
        except InvalidRequest as exc:
            rec_error = f"{exc.field}: {exc}"
    keep = {k: v for k, v in params.items() if k.startswith("f_") and v}

    def link(**changes: Any) -> str:
        merged = {**keep, "sort": page.sort, "order": page.order, **changes}
        extra = [("filter", f) for f in request.query_params.getlist("filter")]
        return "/leaderboard?" + urlencode(list(merged.items()) + extra)

    def sort_link(col: str) -> str:
        flip = "desc" if page.sort == col and page.order == "asc" else "asc"
        return link(sort=col, order=flip)

    llm = any(r.ttft_p99_ms is not None for r in page.rows)
    quality = any(r.accuracy is not None for r in page.rows)
    html = render(
        "leaderboard.html",
        csrf=request.state.csrf,
        page=page,
        columns=COLUMNS + (LLM_COLUMNS if llm else []) + (QUALITY_COLUMNS if quality else []),
        llm=llm,
        quality=quality,
        sortable=rowcounts.SORTABLE,
        filter_values=values,
        sort_link=sort_link,
        page_link=lambda off: link(offset=max(0, off)),
        max_window=leaderboard.MAX_WINDOW,
        rec=rec,
        rec_error=rec_error,
        rec_args=rec_args,
        rec_confident=rec_confident,
    )
    return HTMLResponse(html)


async def _job_context(db: Any, job_id: str, team: str | None) -> dict[str, Any]:
    job = await jobs_store.get_job(db, job_id=job_id, team=team)
    points = await results_store.job_points(db, job)
    raw = await queries.raw_latencies(db, job_id, job.attempt, points)
    return {
        "job": job,
        "points": points,
        "charts": draw.job_charts(points, raw, job.spec.slo, job.spec.sweep),
        "repeats": summarize_repeats(points),
        "running": job.state not in TERMINAL_STATES,
        "interference": interference.matrix(job, points),
    }


def _missing(request: Request, exc: BenchfleetError) -> HTMLResponse:
    """A page for what is not there (an unknown job, or another team's, or a point it does not have): the message as
    a page, with its status, not the API's JSON."""
    return HTMLResponse(render("missing.html", csrf=request.state.csrf, message=exc.message), status_code=exc.status)


@router.get("/jobs/{job_id}", response_class=HTMLResponse)
async def job_page(request: Request, job_id: str) -> HTMLResponse:
    """A job: live progress while it runs, then its points and plots."""
    principal = await require_login(request)
    db = deps.get_db(request)
    try:
        job_id = await lookup.resolve_prefix(db, jobs_store.COLLECTION, job_id, what="job", team=principal.scope)
        context = await _job_context(db, job_id, principal.scope)
    except (NotFound, InvalidRequest) as exc:
        return _missing(request, exc)
    job = context["job"]
    actions = {
        "may_cancel": principal.may_manage(job.owner) and job.state not in TERMINAL_STATES,
        "may_submit": principal.at_least("submitter") and job.part_of is None,
    }
    return HTMLResponse(render("job.html", report=False, csrf=request.state.csrf, **actions, **context))


def _report_assets() -> tuple[str, str]:
    """The CSS and script a report inlines: the pages' own, and uPlot with its licence notice where it was vendored."""
    static, uplot = HERE / "static", HERE / "static" / "vendor" / "uplot"
    css, js = [(static / "app.css").read_text()], [(static / "charts.js").read_text()]
    if (uplot / "uPlot.iife.min.js").is_file():
        notice = "/*! uPlot " + (uplot / "VERSION").read_text().strip() + " (MIT) https://github.com/leeoniya/uPlot */\n"
        js.insert(0, notice + (uplot / "uPlot.iife.min.js").read_text())
        css.append((uplot / "uPlot.min.css").read_text())
    # A script's text ends at the first "</": none of ours holds one, and a vendored file that did would be cut.
    return "\n".join(css), ";\n".join(j.replace("</", "<\\/") for j in js)


async def render_report(db: Any, *, job_id: str, team: str | None = None) -> str:
    """The job page as one self-contained HTML file (inline CSS, the chart library and the charts' data inline, no
    links out: it opens offline), as `team` sees it (None: every team)."""
    context = await _job_context(db, job_id, team)
    css, js = _report_assets()
    return render("job.html", report=True, inline_css=css, inline_js=js, **context)


@router.get("/jobs/{job_id}/points/{index}", response_class=HTMLResponse)
async def point_page(request: Request, job_id: str, index: int) -> HTMLResponse:
    """One point: its verdict and reasons, latency table with CIs, load, stages, windows, charts, where it ran, and
    the raw document folded away."""
    team = (await require_login(request)).scope
    db = deps.get_db(request)
    try:
        job_id = await lookup.resolve_prefix(db, jobs_store.COLLECTION, job_id, what="job", team=team)
        job = await jobs_store.get_job(db, job_id=job_id, team=team)
    except (NotFound, InvalidRequest) as exc:
        return _missing(request, exc)
    points = [p for p in await results_store.job_points(db, job) if p.point.index == index]
    if not points:
        return _missing(request, NotFound(f"job {job_id} has no point {index}", field="index"))
    raw = await queries.raw_latencies(db, job_id, job.attempt, points)
    every = draw.job_charts(points, raw)
    charts = every[:1] + [c for c in every if c["title"].startswith("Timeline:")]
    for i, series in (await queries.raw_llm(db, job_id, job.attempt, points)).items():  # a language model's prefill cost
        charts.append(prefill_chart(i, series.ttft_ms[1], series.prompt_tokens))
    result_json = json.dumps(points[0].model_dump(mode="json", exclude={"latency_hdr", "service_hdr"}), indent=1)
    return HTMLResponse(
        render(
            "point.html",
            csrf=request.state.csrf,
            job=job,
            index=index,
            point=points[0],
            charts=charts,
            has_records=index in raw,
            result_json=result_json,
            estimator=ESTIMATOR,
        )
    )


@router.get("/analysis", response_class=HTMLResponse)
async def analysis_page(
    request: Request,
    metric: str = "p99_ms",
    x: str = "batch_size",
    y: str = "rate",
    filter: str = "",  # noqa: A002
    model: str | None = None,
) -> HTMLResponse:
    """Heat map over two hyper-parameters (of one model unless `model=*` or an axis is the model: averaging different
    models' latencies says nothing), roofline, cost comparison and the hardware table."""
    team = (await require_login(request)).scope
    heatmap.check_args(metric, x, y)
    db = deps.get_db(request)
    rows = [r for r in await leaderboard.select(db, [filter] if filter else [], team=team) if r.get("valid")]
    counts = Counter(str(r["model"]) for r in rows)
    if model is None:  # by default the model with the most valid points, unless the map is over models
        model = "*" if "model" in (x, y) or not counts else counts.most_common(1)[0][0]
    mapped = rows if model == "*" else [r for r in rows if r["model"] == model]
    cost_rows = cost_by_hardware(rows)
    charts = [
        draw.heatmap_chart(heatmap.heat_map(mapped, metric=metric, x=x, y=y), metric, x, y),
        draw.roofline_chart(await roofline(db, rows)),
        draw.cost_chart(cost_rows),
    ]
    html = render(
        "analysis.html",
        csrf=request.state.csrf,
        charts=charts,
        cost=cost_rows,
        metrics=HEAT_METRICS,
        params=HEAT_PARAMS,
        args={"metric": metric, "x": x, "y": y, "filter": filter, "model": model},
        models=sorted(counts),
        hardware=sorted(hardware.HARDWARE.items()) + [("CPU (generic)", hardware.CPU_DEFAULT)],
    )
    return HTMLResponse(html)


COMPARE_CHOICES = 5  # earlier jobs of the same model offered as A


@router.get("/compare", response_class=HTMLResponse)
async def compare_page(
    request: Request, a: str = "", b: str = "", threshold: float = compare_mod.DEFAULT_THRESHOLD, include_imported: bool = False
) -> HTMLResponse:
    """Two jobs (or a job against a pinned baseline) point by point. With B alone (the Jobs list's Compare), the
    earlier finished jobs of B's model are offered as A. A side another tool measured is judged only when asked."""
    team = (await require_login(request)).scope
    result, error, earlier = None, None, []
    db = deps.get_db(request)
    try:
        if a and b:
            result = await queries.compare_jobs(db, a, b, threshold, team=team, include_imported=include_imported)
        elif b:
            b_id = await lookup.resolve_prefix(db, jobs_store.COLLECTION, b, what="job", field="b", team=team)
            job = await jobs_store.get_job(db, job_id=b_id, team=team)
            where = JobFilter(model=job.model_ref.split(":", 1)[0], state=JobState.succeeded)
            after = (job.created_at, job.id)  # the list's own cursor: the jobs submitted before B, newest first
            index = deps.get_resources(request).jobs_index
            earlier = await joblist.list_jobs(db, index, where=where, limit=COMPARE_CHOICES, after=after, team=team)
    except BenchfleetError as exc:
        error = exc.message
    page = {"a": a, "b": b, "threshold": threshold, "result": result, "error": error, "earlier": earlier}
    page |= {"include_imported": include_imported}
    html = render("compare.html", csrf=request.state.csrf, **page)
    return HTMLResponse(html)


# In the API's schema beside the other exports; served here, where the job page is drawn.
report_router = APIRouter(tags=["analysis"])


@report_router.get(API_PREFIX + "/jobs/{job_id}/report.html", response_class=HTMLResponse)
async def job_report(job_id: deps.JobId, request: Request, viewer: deps.Viewer) -> HTMLResponse:
    """A self-contained HTML report of the job (inline CSS, chart library and data; opens offline)."""
    html = await render_report(deps.get_db(request), job_id=job_id, team=viewer.scope)
    return HTMLResponse(html, headers={"Content-Disposition": f'attachment; filename="{job_id}-report.html"'})


def install(app: FastAPI) -> None:
    """Mount the pages, the login and the static assets on the app."""
    app.include_router(login.router)
    app.include_router(router)
    app.include_router(console.router)
    app.include_router(submit.router)
    app.include_router(repository.router)
    app.include_router(report_router)
    app.mount("/static", StaticFiles(directory=HERE / "static"), name="static")
    app.add_exception_handler(login.LoginRequired, login.login_redirect)
