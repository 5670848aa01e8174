"""The web pages: login, leaderboard (with the recommender), job and point pages, analysis views, comparison."""

from __future__ import annotations

import hmac
import json
import math
import statistics
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import numpy as np
from fastapi import APIRouter, FastAPI, Form, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from jinja2 import Environment, FileSystemLoader, select_autoescape

from common.errors import BenchfleetError, InvalidRequest
from common.jobs import TERMINAL_STATES
from common.results import PointResult
from leader.analysis import compare as compare_mod
from leader.analysis import flops, hardware, heatmap, records
from leader.analysis.leaderboard import NUMERIC, LeaderboardIndex, column
from leader.analysis.recommend import recommend
from leader.api import deps
from leader.api.routes.analysis import _job_rows, _latency_loader, get_index
from leader.store import jobs as jobs_store
from leader.store import models as models_store
from leader.store import results as results_store
from leader.web import svg

try:  # the role-based auth names the cookie; before it lands, the same name is used here
    from leader.auth.tokens import SESSION_COOKIE
except ImportError:  # pragma: no cover
    SESSION_COOKIE = "benchfleet_session"

HERE = Path(__file__).parent
env = Environment(loader=FileSystemLoader(HERE / "templates"), autoescape=select_autoescape(["html"]))
COLUMNS = [
    ("model", "model"),
    ("backend", "backend"),
    ("hardware", "hardware"),
    ("batch_size", "batch"),
    ("rate", "load req/s"),
    ("p50_ms", "p50 ms"),
    ("p99_ms", "p99 ms"),
    ("throughput", "throughput"),
    ("valid", "validity"),
    ("cost_usd_per_1m", "cost /1M"),
    ("energy_wh_per_1m", "Wh /1M"),
]
HEAT_METRICS = heatmap.METRICS
HEAT_PARAMS = heatmap.PARAMS
COOKIE_MAX_AGE_S = 8 * 3600

router = APIRouter(include_in_schema=False)


def num(value: Any, digits: int = 2) -> str:
    """A number for a table cell; absent (or not measurable) is an em dash, never 0."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    return f"{value:.{digits}f}"


env.globals["num"] = num


def render(name: str, **context: Any) -> str:
    """Render a template."""
    return env.get_template(name).render(**context)


async def _principal_ok(request: Request, token: str) -> bool:
    """Whether a token may read the pages: a user token (never an agent credential)."""
    resources = deps.get_resources(request)
    authenticate = getattr(deps, "authenticate", None)
    if authenticate is not None:
        principal = await authenticate(resources, token)
        return principal is not None and principal.role not in ("follower", "join")
    return hmac.compare_digest(token.encode(), resources.settings.admin_token.get_secret_value().encode())


class LoginRequired(Exception):
    """The page needs the login cookie."""


async def require_login(request: Request) -> None:
    """Pages redirect to /login without a valid session cookie."""
    token = request.cookies.get(SESSION_COOKIE)
    if not token or not await _principal_ok(request, token):
        raise LoginRequired()


def _safe_next(target: str) -> str:
    # Only local paths: an open redirect would let a link send a logged-in user anywhere.
    return target if target.startswith("/") and not target.startswith("//") and "\\" not in target else "/leaderboard"


@router.get("/login", response_class=HTMLResponse)
async def login_page(next: str = "/leaderboard") -> HTMLResponse:  # noqa: A002
    """The login form."""
    return HTMLResponse(render("login.html", next=_safe_next(next), error=None))


@router.post("/login")
async def login(request: Request, token: str = Form(""), next: str = Form("/leaderboard")) -> Response:  # noqa: A002
    """Check the token and set it as an HttpOnly, SameSite=Strict cookie."""
    if not token or not await _principal_ok(request, token):
        return HTMLResponse(render("login.html", next=_safe_next(next), error="unknown token"), status_code=401)
    response = RedirectResponse(_safe_next(next), status_code=303)
    response.set_cookie(
        SESSION_COOKIE,
        token,
        max_age=COOKIE_MAX_AGE_S,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
        path="/",
    )
    return response


@router.post("/logout")
async def logout() -> Response:
    """Forget the session cookie."""
    response = RedirectResponse("/login", status_code=303)
    response.delete_cookie(SESSION_COOKIE, path="/")
    return response


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
    if not value > 0 and name == "p99_ms":
        raise InvalidRequest("p99_ms must be > 0", field=name)
    return value


@router.get("/leaderboard", response_class=HTMLResponse)
async def leaderboard_page(request: Request) -> HTMLResponse:
    """Every point as a row; sortable and filterable per column; best under SLO highlighted; the recommender above."""
    await require_login(request)
    params = dict(request.query_params)
    index: LeaderboardIndex = get_index(request)
    await index.sync(deps.get_db(request))
    filters, values = _filters_from_form(params)
    filters += request.query_params.getlist("filter")
    sort, order = params.get("sort", "p99_ms"), params.get("order", "asc")
    offset = int(params.get("offset", "0") or 0) if params.get("offset", "0").isdigit() else 0
    page = index.query(sort=sort, order=order, filters=filters, limit=50, offset=offset)
    rec_args = {k: _float_arg(params, k) for k in ("p99_ms", "min_throughput", "max_cost")}
    rec_confident = params.get("confident") == "true"
    rec = None
    if rec_args["p99_ms"] is not None:
        rec = recommend(
            index.select(filters),
            p99_ms=rec_args["p99_ms"],
            min_throughput=rec_args["min_throughput"],
            max_cost=rec_args["max_cost"],
            confident=rec_confident,
        )
    keep = {k: v for k, v in params.items() if k.startswith("f_") and v} | {f"filter{i}": f for i, f in enumerate([])}

    def link(**changes: Any) -> str:
        merged = {**keep, "sort": page.sort, "order": page.order, **changes}
        extra = [("filter", f) for f in request.query_params.getlist("filter")]
        return "/leaderboard?" + urlencode(list(merged.items()) + extra)

    def sort_link(col: str) -> str:
        flip = "desc" if page.sort == col and page.order == "asc" else "asc"
        return link(sort=col, order=flip)

    html = render(
        "leaderboard.html",
        page=page,
        columns=COLUMNS,
        filter_values=values,
        sort_link=sort_link,
        page_link=lambda off: link(offset=max(0, off)),
        rec=rec,
        rec_args=rec_args,
        rec_confident=rec_confident,
    )
    return HTMLResponse(html)


def _cdf_series(points: list[PointResult], raw: dict[int, np.ndarray]) -> list[tuple[str, list[float], list[float]]]:
    series = []
    for p in points:
        label = f"#{p.point.index} {p.point.backend} b{p.point.batch_size} {p.point.rate:g}/s"
        lat = raw.get(p.point.index)
        if lat is not None and lat.size:
            qs = np.linspace(0, 1, 200)
            series.append((label, np.quantile(lat, qs).tolist(), (qs * 100).tolist()))
        elif p.latency_ms is not None:
            pc = p.latency_ms
            series.append(
                (label + " (percentiles)", [pc.p50, pc.p90, pc.p95, pc.p99, pc.p999, pc.max], [50, 90, 95, 99, 99.9, 100])
            )
    return series


def job_charts(points: list[PointResult], raw: dict[int, np.ndarray]) -> list[str]:
    """The job's plots as SVG: CDF, latency vs throughput, timeline, stages, resources, cold start."""
    charts = [
        svg.line_chart(
            "Latency CDF per point",
            _cdf_series(points, raw),
            xlabel="latency from intended time (ms)",
            ylabel="percent of requests",
            markers=False,
            logx=True,
            empty="no latencies yet",
        )
    ]
    ladders: dict[str, list[PointResult]] = {}
    for p in points:
        ladders.setdefault(f"{p.point.backend} b{p.point.batch_size}", []).append(p)
    curve = [
        (k, [p.achieved_rate for p in v], [p.latency_ms.p99 if p.latency_ms else None for p in v])
        for k, v in ((k, sorted(v, key=lambda p: p.point.rate)) for k, v in ladders.items())
    ]
    charts.append(
        svg.line_chart("p99 latency vs throughput (rate ladder)", curve, xlabel="achieved throughput (req/s)", ylabel="p99 ms")
    )
    timeline = [(f"#{p.point.index} p99", [w.t_s for w in p.windows], [w.p99_ms for w in p.windows]) for p in points if p.windows]
    charts.append(
        svg.line_chart(
            "Timeline: p99 per window",
            timeline,
            xlabel="seconds into the measured part",
            ylabel="p99 ms",
            empty="no per-window metrics were reported",
        )
    )
    labels = [f"#{p.point.index}" for p in points]
    stage_names = sorted({name for p in points for name in (p.stages_ms or {})})
    charts.append(
        svg.bar_chart(
            "Stage breakdown (mean ms)",
            labels,
            {s: [(p.stages_ms or {}).get(s) for p in points] for s in stage_names},
            ylabel="ms",
            empty="no stage breakdown was measured",
        )
    )
    res = [p.resources for p in points]
    charts.append(
        svg.bar_chart(
            "Server CPU (mean %)",
            labels,
            {"cpu %": [r.server_cpu_percent_mean if r else None for r in res]},
            ylabel="% of one core",
            empty="no resource samples",
        )
    )
    charts.append(
        svg.bar_chart(
            "GPU utilisation (mean %)",
            labels,
            {"gpu %": [r.gpu_util_percent_mean if r else None for r in res]},
            ylabel="%",
            empty="no GPU on this host (not measured, not zero)",
        )
    )
    cold = [p.cold_start for p in points]
    charts.append(
        svg.bar_chart(
            "Cold start (s)",
            labels,
            {
                "to ready": [c.to_ready_s if c else None for c in cold],
                "ready → first answer": [(c.to_first_answer_s - c.to_ready_s) if c else None for c in cold],
            },
            ylabel="s",
            empty="no cold start measured",
        )
    )
    return charts


async def _raw_latencies(db: Any, job_id: str, attempt: int, points: list[PointResult]) -> dict[int, np.ndarray]:
    out = {}
    for p in points:
        blob = await records.load_records(db, job_id=job_id, attempt=attempt, index=p.point.index)
        if blob:
            out[p.point.index] = records.latencies_ms(records.decode(blob))
    return out


async def _job_context(db: Any, job_id: str) -> dict[str, Any]:
    job = await jobs_store.get_job(db, job_id=job_id)
    points = await results_store.attempt_points(db, job_id=job_id, attempt=job.attempt)
    raw = await _raw_latencies(db, job_id, job.attempt, points)
    return {"job": job, "points": points, "charts": job_charts(points, raw), "running": job.state not in TERMINAL_STATES}


@router.get("/jobs/{job_id}", response_class=HTMLResponse)
async def job_page(request: Request, job_id: str) -> HTMLResponse:
    """A job: live progress while it runs, then its points and plots."""
    await require_login(request)
    context = await _job_context(deps.get_db(request), job_id)
    return HTMLResponse(render("job.html", report=False, **context))


async def render_report(db: Any, *, job_id: str) -> str:
    """The job page as one self-contained HTML file (inline CSS, inline SVG, no script, no links out)."""
    context = await _job_context(db, job_id)
    return render("job.html", report=True, inline_css=(HERE / "static" / "app.css").read_text(), **context)


@router.get("/jobs/{job_id}/points/{index}", response_class=HTMLResponse)
async def point_page(request: Request, job_id: str, index: int) -> HTMLResponse:
    """One point: its CDF and every recorded field."""
    await require_login(request)
    db = deps.get_db(request)
    job = await jobs_store.get_job(db, job_id=job_id)
    points = [p for p in await results_store.attempt_points(db, job_id=job_id, attempt=job.attempt) if p.point.index == index]
    if not points:
        raise InvalidRequest(f"job {job_id} has no point {index}", field="index")
    raw = await _raw_latencies(db, job_id, job.attempt, points)
    charts = job_charts(points, raw)[:1] + job_charts(points, raw)[2:3]
    result_json = json.dumps(points[0].model_dump(mode="json", exclude={"latency_hdr", "service_hdr"}), indent=1)
    return HTMLResponse(
        render("point.html", job=job, index=index, charts=charts, has_records=index in raw, result_json=result_json)
    )


def _mean(values: list[float]) -> float | None:
    return statistics.fmean(values) if values else None


async def _roofline(db: Any, rows: list[dict[str, Any]]) -> str:
    """Achieved FLOP/s against arithmetic intensity, under the ceilings of the devices present."""
    costs: dict[str, flops.ModelCost | None] = {}
    series: dict[str, tuple[list[float], list[float]]] = {}
    devices: set[str] = set()
    for row in rows:
        if not row.get("valid") or not row.get("throughput"):
            continue
        model = row["model"]
        if model not in costs:
            costs[model] = await _model_cost(db, model)
        cost = costs[model]
        if cost is None:
            continue
        batch = max(1, row["batch_size"])
        achieved = row["throughput"] * batch * cost.flops_per_sample
        # Per batch: the weights are read once, the FLOPs scale with the batch.
        intensity = cost.flops_per_sample * batch / cost.weight_bytes
        name, _ = hardware.ceiling_for(row["hardware"])
        devices.add(name)
        xs, ys = series.setdefault(f"{model} on {name}", ([], []))
        xs.append(intensity)
        ys.append(achieved)
    if not series:
        return svg.line_chart("Roofline", [], xlabel="", ylabel="", empty="no valid points of models with countable dense layers")
    all_x = [x for xs, _ in series.values() for x in xs]
    lo, hi = min(all_x) / 4, max(all_x) * 4
    grid = list(np.geomspace(lo, hi, 40))
    out = []
    for name in sorted(devices):
        c = hardware.HARDWARE.get(name, hardware.CPU_DEFAULT)
        out.append((f"ceiling {name}", grid, [min(c.fp32_flops, c.bandwidth * x) for x in grid]))
    out += [(label, xs, ys) for label, (xs, ys) in series.items()]
    return svg.line_chart(
        "Roofline (FP32 ceilings)", out, xlabel="arithmetic intensity (FLOP/byte)", ylabel="FLOP/s", logx=True, logy=True
    )


async def _onnx_cost(db: Any, ref: str) -> flops.ModelCost | None:
    name, _, version = ref.partition(":")
    try:
        meta, chunks = await models_store.open_model_file(db, name=name, version=version or None)  # type: ignore[arg-type]
        data = b"".join([chunk async for chunk in chunks])
    except BenchfleetError:
        return None
    return flops.model_cost(data) if meta.format == "onnx" else None


async def _model_cost(db: Any, ref: str) -> flops.ModelCost | None:
    """A canonical model's analytic FLOPs/bytes per inference (exact), else the estimate from its ONNX weights."""
    name, _, version = ref.partition(":")
    try:
        meta = await models_store.get_model(db, name=name, version=version or None)
    except BenchfleetError:
        return None
    canon = meta.canonical
    if canon is not None and canon.flops and canon.bytes:
        return flops.ModelCost(flops_per_sample=float(canon.flops), weight_bytes=float(canon.bytes))
    return await _onnx_cost(db, ref)


@router.get("/analysis", response_class=HTMLResponse)
async def analysis_page(
    request: Request, metric: str = "p99_ms", x: str = "batch_size", y: str = "rate", filter: str = ""
) -> HTMLResponse:  # noqa: A002
    """Heat map over two hyper-parameters, roofline, cost comparison and the hardware table."""
    await require_login(request)
    heatmap.check_args(metric, x, y)
    db = deps.get_db(request)
    index = get_index(request)
    await index.sync(db)
    rows = [r for r in index.select([filter] if filter else []) if r.get("valid")]
    grid = heatmap.heat_map(rows, metric=metric, x=x, y=y)
    heat = svg.heatmap(
        f"{metric} over {x} × {y}",
        grid.xs,
        grid.ys,
        {(c.x, c.y): c.value for c in grid.cells},
        xlabel=x,
        ylabel=y,
        empty=f"no valid points with {metric}",
    )
    cost: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        cost.setdefault(r["hardware"], []).append(r)
    cost_rows = [
        {
            "hardware": hw,
            "points": len(rs),
            "throughput": max((r["throughput"] or 0) for r in rs),
            "energy": _mean([r["energy_wh_per_1m"] for r in rs if r.get("energy_wh_per_1m") is not None]),
            "co2": _mean([r["co2_g_per_1m"] for r in rs if r.get("co2_g_per_1m") is not None]),
            "cost": _mean([r["cost_usd_per_1m"] for r in rs if r.get("cost_usd_per_1m") is not None]),
        }
        for hw, rs in sorted(cost.items())
    ]
    cost_chart = svg.bar_chart(
        "Cost per 1M requests by hardware",
        [c["hardware"] for c in cost_rows],
        {"cost": [c["cost"] for c in cost_rows]},
        ylabel="per 1M requests",
        empty="no cost measured (needs resource sampling and a configured price)",
    )
    charts = [heat, await _roofline(db, rows), cost_chart]
    html = render(
        "analysis.html",
        charts=charts,
        cost=cost_rows,
        metrics=HEAT_METRICS,
        params=HEAT_PARAMS,
        args={"metric": metric, "x": x, "y": y, "filter": filter},
        hardware=sorted(hardware.HARDWARE.items()) + [("CPU (generic)", hardware.CPU_DEFAULT)],
    )
    return HTMLResponse(html)


@router.get("/compare", response_class=HTMLResponse)
async def compare_page(
    request: Request, a: str = "", b: str = "", threshold: float = compare_mod.DEFAULT_THRESHOLD
) -> HTMLResponse:
    """Two jobs (or a job against a pinned baseline) point by point."""
    await require_login(request)
    result, error = None, None
    if a and b:
        db = deps.get_db(request)
        try:
            a_rows, b_rows = await _job_rows(db, a, "a"), await _job_rows(db, b, "b")
            result = await compare_mod.compare_rows(
                a_rows, b_rows, a=a, b=b, load_latencies=_latency_loader(db), threshold=threshold
            )
        except BenchfleetError as exc:
            error = exc.message
    return HTMLResponse(render("compare.html", a=a, b=b, threshold=threshold, result=result, error=error))


async def _login_redirect(request: Request, exc: Exception) -> Response:
    target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    return RedirectResponse("/login?" + urlencode({"next": target}), status_code=303)


def install(app: FastAPI) -> None:
    """Mount the pages, the login and the static assets on the app."""
    app.include_router(router)
    app.mount("/static", StaticFiles(directory=HERE / "static"), name="static")
    app.add_exception_handler(LoginRequired, _login_redirect)
