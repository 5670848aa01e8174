"""A job's points in the formats other tools read: llm-d's benchmark report v0.2 (checked against the schema as its
documentation defines it, common/formats/llmd_report.py, which itself takes a report shaped as the documented example and
refuses what that schema refuses) and the summary MLPerf LoadGen's logs give, under LoadGen's key names."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

import pytest

from common.errors import InvalidRequest
from common.formats.llmd_report import validate_report
from common.spec.grid import expand
from common.spec.parse import parse_spec
from common.wire.imports import ImportedRun
from common.wire.jobs import JobView
from common.wire.results import Environment, LlmFigures, Percentiles, PointResult
from leader.analysis.reports import DEFINITIONS, check_job, llmd_report, mlperf_summary

SPEC = {
    "name": "chat",
    "model": "tiny:1",
    "backends": ["vllm"],
    "load": {"pattern": "poisson", "rate": [8], "duration": "10s"},
    "llm": {"prompt_tokens": {"dist": "uniform", "min": 16, "max": 64, "mean": 40}, "output_tokens": 32},
}
STARTED = datetime(2026, 11, 30, 8, 0, 0, tzinfo=UTC)


def _pct(scale: float) -> Percentiles:
    return Percentiles(
        count=80, mean=scale, p50=scale, p90=1.5 * scale, p95=1.7 * scale, p99=2 * scale, p999=2.5 * scale, max=3 * scale
    )


def _job(spec: dict[str, Any] = SPEC) -> tuple[JobView, PointResult]:
    parsed = parse_spec(spec)
    (point,) = expand(parsed)
    env = Environment(
        follower_id="f",
        host="h",
        cpu_model="Xeon",
        cpu_count=2,
        gpus=[],
        python="3.11",
        benchfleet="0.9",
        backend_version="vllm 0.32.0",
        seed=0,
    )
    llm = LlmFigures(
        ttft_ms=_pct(20.0),
        ttft_sent_ms=_pct(19.0),
        itl_ms=_pct(2.0),
        itl_request_ms=None,
        tpot_ms=_pct(2.1),
        e2e_sent_ms=_pct(80.0),
        user_tokens_per_s_p50=None,
        output_tokens_per_s=256.0,
        input_tokens_per_s=320.0,
    )
    result = PointResult(
        point=point,
        started_at=STARTED,
        measured_s=10.0,
        requests=80,
        ok=80,
        errors=0,
        offered_rate=8.0,
        achieved_rate=7.9,
        latency_ms=_pct(80.0),
        service_ms=_pct(79.0),
        send_lag_ms=None,
        cold_start=None,
        valid=True,
        environment=env,
        llm=llm,
    )
    job = JobView(
        id="job1",
        name="chat",
        state="succeeded",
        attempt=1,
        follower_id="f",
        spec=parsed,
        model_ref="tiny:1",
        points_total=1,
        points_done=1,
        estimate_s=12.0,
        created_at=STARTED,
        updated_at=STARTED,
        history=[],
        owner="sue",
    )
    return job, result


def test_a_point_as_an_llmd_report_is_valid_and_carries_its_figures_and_definitions() -> None:
    job, point = _job()
    report = llmd_report(job, point)
    assert validate_report(report) == []
    aggregate = report["results"]["request_performance"]["aggregate"]
    assert aggregate["latency"]["time_to_first_token"] == {
        "units": "ms",
        "mean": 20.0,
        "p50": 20.0,
        "p90": 30.0,
        "p95": 34.0,
        "p99": 40.0,
        "p99p9": 50.0,
        "max": 60.0,
    }
    assert aggregate["latency"]["inter_token_latency"]["units"] == "ms/token" and aggregate["requests"] == {
        "total": 80,
        "failures": 0,
    }
    assert aggregate["throughput"]["requests_rate"] == {"units": "queries/s", "mean": 7.9}
    assert aggregate["throughput"]["total_token_rate"]["mean"] == 576.0
    load = report["scenario"]["load"]
    assert load["standardized"]["rate_qps"] == 8.0 and load["standardized"]["stage"] == 0
    assert load["standardized"]["input_seq_len"] == {"distribution": "random", "value": 40, "min": 16, "max": 64}
    assert load["standardized"]["output_seq_len"] == {"distribution": "fixed", "value": 32}
    assert load["metadata"]["description"] == f"{DEFINITIONS}; verdict: valid"
    assert report["run"] == {
        "uid": "job1-0",
        "eid": "job1",
        "user": "sue",
        "time": {"start": "2026-11-30T08:00:00+00:00", "end": "2026-11-30T08:00:10+00:00", "duration": "PT10S"},
    }


# A report shaped as llm-d-benchmark's documented v0.2 example (br_v0_2_example.yaml), written out here in brief.
DOCUMENTED = {
    "version": "0.2",
    "run": {
        "uid": "38b1",
        "eid": "d9c5",
        "cid": "0982",
        "pid": "052d",
        "user": "someone",
        "time": {"start": "2025-11-05T18:00:42Z", "end": "2025-11-05T18:17:03Z", "duration": "PT49.97S"},
    },
    "scenario": {
        "stack": [
            {
                "metadata": {"kind": "inference_engine", "schema_version": "0.0.1", "label": "vllm-svc-0", "cfg_id": "cc73"},
                "standardized": {
                    "tool": "llm-d",
                    "tool_version": "0.3.1",
                    "role": "prefill",
                    "model": {"name": "Qwen/Qwen3-0.6B"},
                    "accelerator": {"model": "H100", "count": 8, "parallelism": {"dp": 1, "ep": 1, "pp": 1, "tp": 8}},
                },
                "native": {"args": {"--block-size": 1024, "--disable-log-requests": None}, "envars": {"UCX_TLS": "tcp"}},
            },
            {
                "metadata": {"kind": "generic", "label": "epp-0", "cfg_id": "4700"},
                "standardized": {"tool": "scheduler", "tool_version": "0.3.2", "kind_draft": "router", "some_config_param": 93},
                "native": {"config": {"plugins": [{"type": "queue-scorer"}]}},
            },
        ],
        "load": {
            "metadata": {"schema_version": "0.0.1", "cfg_id": "a4e1"},
            "standardized": {
                "tool": "inference-perf",
                "tool_version": "0.3.0",
                "stage": 3,
                "source": "sampled",
                "input_seq_len": {"distribution": "fixed", "value": 2148},
                "output_seq_len": {"distribution": "gaussian", "value": 1000, "std_dev": 100},
                "rate_qps": 10,
                "concurrency": float("inf"),
            },
            "native": {"config": {"load": {"type": "constant"}}},
        },
    },
    "results": {
        "request_performance": {
            "aggregate": {
                "requests": {"total": 500, "failures": 0, "input_length": {"units": "count", "mean": 2262.4, "p99": 2322.0}},
                "throughput": {
                    "output_token_rate": {"units": "tokens/s", "mean": 2262.4},
                    "requests_rate": {"units": "queries/s", "mean": 9.9},
                },
                "latency": {
                    "time_to_first_token": {"units": "s", "mean": 0.0368, "p99": 0.0502},
                    "inter_token_latency": {"units": "s/token", "mean": 0.0368},
                    "request_latency": {"units": "s", "mean": 0.0368},
                },
            }
        },
        "observability": {"scrape_info": {"interval_seconds": 15}},
        "profiling": {"anything_goes": 5},
    },
}


def _broken(path: tuple[str | int, ...], value: Any) -> dict[str, Any]:
    doc = copy.deepcopy(DOCUMENTED)
    at: Any = doc
    for key in path[:-1]:
        at = at[key]
    at[path[-1]] = value
    return doc


def test_the_schema_takes_the_documented_example_and_refuses_what_the_schema_refuses() -> None:
    assert validate_report(DOCUMENTED) == []
    latency = ("results", "request_performance", "aggregate", "latency")
    wrong_units = _broken((*latency, "inter_token_latency"), {"units": "ms", "mean": 1.0})
    assert any("inter_token_latency: units 'ms'" in e for e in validate_report(wrong_units))
    extra = _broken(("run", "hostname"), "x")
    assert [e for e in validate_report(extra) if e.startswith("run.hostname")]
    half = _broken(("scenario", "load", "standardized", "concurrency"), 2.5)
    assert any("concurrency must be a whole number" in e for e in validate_report(half))
    kind = _broken(("scenario", "stack", 1, "standardized", "kind"), "generic")
    assert any("standardized must not hold kind" in e for e in validate_report(kind))
    engine = _broken(("scenario", "stack", 0, "standardized", "role"), "aggregate")
    assert validate_report(engine)
    assert validate_report(_broken(("version",), "0.1"))


def test_a_point_as_loadgens_summary_uses_its_key_names() -> None:
    job, point = _job()
    summary = mlperf_summary(job, point)
    assert summary["effective_scenario"] == "Server" and summary["effective_target_qps"] == 8.0
    assert summary["result_validity"] == "VALID" and summary["result_query_count"] == 80
    assert summary["result_99.00_percentile_latency_ns"] == 160_000_000 and summary["result_mean_latency_ns"] == 80_000_000
    assert summary["result_first_token_99.00_percentile_latency_ns"] == 40_000_000
    assert summary["result_time_per_output_token_50.00_percentile_ns"] == 2_100_000
    assert summary["result_completed_samples_per_sec"] == 7.9 and summary["benchfleet_definitions"] == DEFINITIONS
    closed = {**SPEC, "load": {"pattern": "closed", "concurrency": [4], "duration": "10s"}}
    assert mlperf_summary(*_job(closed))["effective_scenario"] == "none (benchfleet's closed load has no LoadGen scenario)"


def test_an_imported_job_and_a_tensor_job_are_refused_by_name() -> None:
    job, _ = _job()
    imported = job.model_copy(
        update={"imported": ImportedRun(tool="vllm", version=None, command=None, model=None, url=None, files=[])}
    )
    with pytest.raises(InvalidRequest) as refused:
        check_job(imported, "mlperf")
    assert refused.value.field == "job_id" and "measured by another tool (vllm)" in refused.value.message
    tensor = job.model_copy(update={"spec": parse_spec({"name": "t", "model": "m:1", "load": {"rate": [5]}})})
    with pytest.raises(InvalidRequest) as llm_only:
        check_job(tensor, "llm-d")
    assert llm_only.value.field == "format"
    check_job(tensor, "mlperf")
