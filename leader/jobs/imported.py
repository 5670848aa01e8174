"""An imported run as a job of kind `imported`: its stored document and one point result per load level (pure: no
database). Its spec describes what the tool ran, for the pages and compare; nothing ever places or runs it. Its points
carry the tool's figures under the tool's definitions, benchfleet's recomputation where the files had per-request
records, and no validity verdict of benchfleet's (reason `not_judged`), so they decide no gate, recommendation or
search unless a compare opts in."""

from __future__ import annotations

import math
from datetime import datetime
from typing import Any

from common.formats.imports.model import Level, Run
from common.formats.imports.recompute import recompute
from common.spec.job import JobSpec, PointSpec
from common.spec.target import IMPORTED_PROTOCOL, TargetSpec
from common.wire.imports import TOOL_NAMES, ImportedFrom, ImportedRun
from common.wire.jobs import JobState
from common.wire.results import Environment, LlmFigures, Percentiles, PointResult, Reason
from leader.store.jobdocs import history_entry

# Where the files do not name the server (vLLM's result file, perf_analyzer's CSV): a host that cannot resolve
# (RFC 2606's .invalid), so the spec never points at a real one.
UNKNOWN_URL = "http://not-in-the-files.invalid"


def not_judged(tool: str) -> str:
    return (
        f"measured by {TOOL_NAMES[tool]} and imported: benchfleet did not watch the run (its send lag, generator and "
        "server), so it gives no verdict"
    )


def _percentiles(stat: dict[str, float] | None) -> Percentiles | None:
    """The tool's summary as benchfleet's Percentiles, where it has at least p50 and p99; what it does not report
    stays empty (None), never filled from a neighbour."""
    if not stat or "p50" not in stat or "p99" not in stat:
        return None
    return Percentiles(
        count=int(stat.get("count", 0)),
        mean=stat.get("mean"),
        p50=stat["p50"],
        p90=stat.get("p90"),
        p95=stat.get("p95"),
        p99=stat["p99"],
        p999=stat.get("p999"),
        max=stat.get("max"),
    )


def _llm(level: Level) -> LlmFigures | None:
    if level.ttft is None:
        return None
    return LlmFigures(
        ttft_ms=_percentiles(level.ttft),
        ttft_sent_ms=None,  # the tool's TTFT is ttft_ms, labelled with its definition; no second claim beside it
        itl_ms=_percentiles(level.itl),
        itl_request_ms=None,
        tpot_ms=_percentiles(level.tpot),
        e2e_sent_ms=_percentiles(level.latency),
        user_tokens_per_s_p50=None,
        output_tokens_per_s=float(level.output_tokens_per_s or 0.0),
        input_tokens_per_s=float(level.input_tokens_per_s or 0.0),
    )


def _environment(run: Run) -> Environment:
    tool = TOOL_NAMES[run.tool]
    return Environment(
        follower_id="imported",
        host=run.url or "not in the files",
        cpu_model="not in the files",
        cpu_count=0,
        gpus=[],
        python="",
        benchfleet="",
        backend_version=f"{tool} {run.version or '(version not in the files)'}",
        seed=0,
    )


def point_results(run: Run, started_at: datetime) -> list[PointResult]:
    """One point per load level, in the tool's order."""
    out = []
    why = not_judged(run.tool)
    for index, level in enumerate(run.levels):
        point = PointSpec(
            index=index,
            backend="endpoint",
            batch_size=1,
            pattern="closed" if level.pattern == "closed" else level.pattern,
            rate=level.rate,
            duration_s=level.duration_s,
            warmup_s=0.0,
            seed=0,
            concurrency=level.concurrency if level.pattern == "closed" else None,
        )
        origin = ImportedFrom(
            tool=run.tool,
            version=run.version,
            definitions=run.definitions,
            not_judged=why,
            behind=level.behind,
            recomputed=recompute(level, run.due_by),
            level=level.level,
        )
        out.append(
            PointResult(
                point=point,
                started_at=run.started_at or started_at,
                measured_s=level.duration_s,
                requests=level.requests,
                ok=level.ok,
                errors=level.requests - level.ok,
                offered_rate=level.rate,
                achieved_rate=level.achieved_rate if math.isfinite(level.achieved_rate) else 0.0,
                latency_ms=_percentiles(level.latency),
                service_ms=_percentiles(level.latency),
                send_lag_ms=None,
                cold_start=None,
                valid=False,
                reasons=[Reason(code="not_judged", text=why)],
                environment=_environment(run),
                llm=_llm(level) if run.kind == "llm" else None,
                imported=origin,
            )
        )
    return out


def _spec(run: Run, name: str, model: str) -> JobSpec:
    first = run.levels[0]
    closed = first.pattern == "closed"
    load: dict[str, Any] = {"pattern": "closed" if closed else first.pattern, "duration": max(first.duration_s, 0.001)}
    if closed:
        load["concurrency"] = sorted({lv.concurrency or 1 for lv in run.levels})
    else:
        load["rate"] = sorted({lv.rate for lv in run.levels if lv.rate > 0}) or [1.0]
    target = TargetSpec(url=run.url or UNKNOWN_URL, protocol=IMPORTED_PROTOCOL[run.kind])
    spec = {"name": name, "model": model, "backends": ["endpoint"], "load": load, "target": target.model_dump()}
    return JobSpec.model_validate(spec)


def job_document(
    run: Run, *, job_id: str, name: str, model: str, owner: str, team: str, files: list[str], now: datetime
) -> dict[str, Any]:
    """The stored document of an imported job: finished (succeeded) from the start, never placed."""
    origin = ImportedRun(
        tool=run.tool, version=run.version, command=run.command, model=run.model, url=run.url, settings=run.settings, files=files
    )
    spec = _spec(run, name, model)
    points = [r.point for r in point_results(run, now)]
    history = [history_entry(JobState.succeeded, 1, reason=f"imported from {TOOL_NAMES[run.tool]}'s files ({', '.join(files)})")]
    return {
        "_id": job_id,
        "kind": "imported",
        "imported": origin.model_dump(),
        "name": name,
        "state": JobState.succeeded.value,
        "attempt": 1,
        "follower_id": None,
        "dispatched": True,
        "spec": spec.model_dump(mode="json"),
        "model_ref": model,
        "points": [p.model_dump(mode="json") for p in points],
        "points_total": len(points),
        "points_done": len(points),
        "estimate_s": 0.0,
        "base_estimate_s": 0.0,
        "measured_s": sum(p.duration_s for p in points),
        "created_at": now,
        "updated_at": now,
        "error": None,
        "owner": owner,
        "team": team,
        "history": history,
        "traceparent": None,
    }
