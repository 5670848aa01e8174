"""A job's points in the report formats other tools read: llm-d's benchmark report v0.2 (one report per point, checked
against common/formats/llmd_report.py before it leaves) and the summary MLPerf LoadGen writes (its detail log's keys:
result_*, effective_*), so benchfleet's results travel to the tools teams also use. Each says how benchfleet defines
its figures: latency and TTFT from the intended send (LoadGen's scheduled issue; not from the send, as llm-d's
harnesses mostly count)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from common.errors import InvalidRequest
from common.formats.llmd_report import validate_report
from common.spec.llm import TokenLengths
from common.wire.jobs import JobView
from common.wire.results import Percentiles, PointResult

REPORT_FORMATS = ("llm-d", "mlperf")
DEFINITIONS = (
    "benchfleet: latency and TTFT from each request's intended send (its scheduled time), ITL every gap between token "
    "events pooled over requests, TPOT each request's (last token - first) / (server's output tokens - 1)"
)
# benchfleet's length distributions by llm-d's names (lognormal and empirical have none there: other).
_DISTRIBUTION = {"fixed": "fixed", "normal": "gaussian", "uniform": "random", "lognormal": "other", "empirical": "other"}


def check_job(job: JobView, fmt: str) -> None:
    """A job these formats can describe, or 422 naming what is wrong."""
    if job.imported is not None:
        raise InvalidRequest(
            f"job {job.id} was measured by another tool ({job.imported.tool}) and imported: its own files are kept with it",
            field="job_id",
        )
    if fmt == "llm-d" and job.spec.llm is None:
        raise InvalidRequest("llm-d reports describe language-model serving; this job measured a tensor model", field="format")


def _stats(p: Percentiles | None, units: str, scale: float = 1.0) -> dict[str, Any] | None:
    if p is None or p.mean is None:
        return None
    keys = {"p50": p.p50, "p90": p.p90, "p95": p.p95, "p99": p.p99, "p99p9": p.p999, "max": p.max}
    return {"units": units, "mean": p.mean * scale, **{k: v * scale for k, v in keys.items() if v is not None}}


def _length(t: TokenLengths) -> dict[str, Any]:
    out: dict[str, Any] = {"distribution": _DISTRIBUTION[t.dist], "value": t.mean}
    if t.dist == "normal":
        out["std_dev"] = t.std
    if t.dist != "fixed":
        out |= {"min": t.min} | ({"max": t.max} if t.max is not None else {})
    return out


def llmd_report(job: JobView, p: PointResult) -> dict[str, Any]:
    """One point as an llm-d benchmark report v0.2 (its figures in ms; benchfleet's definitions in the load's
    description)."""
    llm, spec, env = p.llm, job.spec, p.environment
    assert spec.llm is not None  # check_job
    end = p.started_at + timedelta(seconds=p.measured_s)
    closed = p.point.pattern == "closed"
    standardized: dict[str, Any] = {
        "tool": "benchfleet",
        "tool_version": env.benchfleet,
        "source": "sampled" if spec.llm.dataset else "random",
        "stage": p.point.index,
        "input_seq_len": _length(spec.llm.prompt_tokens),
        "output_seq_len": _length(spec.llm.output_tokens),
    }
    standardized |= {"concurrency": p.point.concurrency} if closed else {"rate_qps": p.point.rate}
    server = {
        "metadata": {"kind": "generic", "label": p.point.backend, "cfg_id": env.config_hash or job.id},
        "standardized": {
            "tool": p.point.backend,
            "tool_version": env.backend_version,
            "model": job.model_ref,
            "hardware": ", ".join(env.gpus) or env.cpu_model,
        },
        "native": {"config": p.point.server.model_dump(mode="json", exclude_defaults=True)},
    }
    latency = {
        "time_to_first_token": _stats(llm.ttft_ms, "ms") if llm else None,
        "inter_token_latency": _stats(llm.itl_ms, "ms/token") if llm else None,
        "time_per_output_token": _stats(llm.tpot_ms, "ms/token") if llm else None,
        "request_latency": _stats(p.latency_ms, "ms"),
    }
    throughput = {"requests_rate": {"units": "queries/s", "mean": p.achieved_rate}}
    if llm is not None:
        throughput |= {
            "output_token_rate": {"units": "tokens/s", "mean": llm.output_tokens_per_s},
            "input_token_rate": {"units": "tokens/s", "mean": llm.input_tokens_per_s},
            "total_token_rate": {"units": "tokens/s", "mean": llm.output_tokens_per_s + llm.input_tokens_per_s},
        }
    report = {
        "version": "0.2",
        "run": {
            "uid": f"{job.id}-{p.point.index}",
            "eid": job.id,
            "time": {"start": p.started_at.isoformat(), "end": end.isoformat(), "duration": f"PT{p.measured_s:g}S"},
            "user": job.owner,
        },
        "scenario": {
            "stack": [server],
            "load": {
                "metadata": {"cfg_id": job.id, "description": f"{DEFINITIONS}; verdict: {_verdict(p)}"},
                "standardized": standardized,
                "native": {"config": spec.model_dump(mode="json", exclude_defaults=True)},
            },
        },
        "results": {
            "request_performance": {
                "aggregate": {
                    "requests": {"total": p.requests, "failures": p.errors},
                    "latency": {k: v for k, v in latency.items() if v is not None},
                    "throughput": throughput,
                }
            }
        },
    }
    problems = validate_report(report)
    assert not problems, problems  # benchfleet's own export breaks the schema: a bug, never the user's
    return report


def _verdict(p: PointResult) -> str:
    return "valid" if p.valid else "invalid: " + "; ".join(p.invalid_reasons)


def _ns(prefix: str, p: Percentiles | None, suffix: str = "latency_ns") -> dict[str, int]:
    """A distribution under LoadGen's key names (ns)."""
    if p is None:
        return {}
    pct = {"50.00": p.p50, "90.00": p.p90, "95.00": p.p95, "99.00": p.p99, "99.90": p.p999}
    out = {f"result_{prefix}{q}_percentile_{suffix}": round(v * 1e6) for q, v in pct.items() if v is not None}
    if p.mean is not None:
        out[f"result_{prefix}mean_{suffix}"] = round(p.mean * 1e6)
    if p.max is not None:
        out[f"result_{prefix}max_{suffix}"] = round(p.max * 1e6)
    return out


def mlperf_summary(job: JobView, p: PointResult) -> dict[str, Any]:
    """One point as the summary LoadGen's logs give (its keys); the scenario a Poisson open loop is (Server), or a single
    user (SingleStream), or none where benchfleet's load has no LoadGen scenario (said)."""
    pattern = p.point.pattern
    scenario = (
        "Server" if pattern == "poisson" else ("SingleStream" if pattern == "closed" and p.point.concurrency == 1 else None)
    )
    out: dict[str, Any] = {
        "benchfleet_job": job.id,
        "benchfleet_point": p.point.index,
        "benchfleet_definitions": DEFINITIONS,
        "effective_scenario": scenario or f"none (benchfleet's {pattern} load has no LoadGen scenario)",
        "effective_test_mode": "PerformanceOnly",
        "effective_min_duration_ms": round(p.point.duration_s * 1000),
        "result_validity": "VALID" if p.valid else "INVALID",
        "result_invalid_reason": "" if p.valid else "; ".join(p.invalid_reasons),
        "result_query_count": p.requests,
        "num_errors": p.errors,
        "result_scheduled_samples_per_sec": p.offered_rate * p.point.batch_size,
        "result_completed_samples_per_sec": p.achieved_rate * p.point.batch_size,
        "loadgen_version": f"benchfleet {p.environment.benchfleet}",
    }
    if pattern == "poisson":
        out["effective_target_qps"] = p.point.rate
    out |= _ns("", p.latency_ms)
    if p.llm is not None:
        out |= _ns("first_token_", p.llm.ttft_ms)
        out |= _ns("time_per_output_token_", p.llm.tpot_ms, "ns")
        out["result_completed_tokens_per_second"] = p.llm.output_tokens_per_s
    return out
