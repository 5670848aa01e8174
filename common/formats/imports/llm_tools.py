"""Readers of the LLM benchmark clients' result files: `vllm bench serve --save-result`, AIPerf, GuideLLM,
inference-perf and genai-bench. Each takes {file name: bytes} and gives a Run; the definitions are docs/llm.md's."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from common.formats.imports.model import (
    ImportRefused,
    Level,
    Record,
    Run,
    load_json,
    need,
    number,
    rate_behind,
    scaled,
    stats_of,
)
from common.wire.imports import TOOL_NAMES, Definitions

VLLM = Definitions(
    latency="from its send stamp to the last byte (not from the scheduled time)",
    ttft="first event with choices (a chat role chunk included), from its send stamp",
    itl="every gap between events with choices, pooled over requests",
    tpot="per request: (latency - TTFT) / (output tokens - 1)",
)
AIPERF = Definitions(
    latency="from the request's send to the last response byte",
    ttft="first response chunk, from the request's send",
    itl="per request: (latency - TTFT) / (output tokens - 1); chunk gaps are its separate inter-chunk latency",
    tpot="as its ITL",
)
GUIDELLM = Definitions(
    latency="from the request's start to its end",
    ttft="first streamed token, from the request's start",
    itl="per request: (last token - first token) / (output tokens - 1)",
    tpot="per request: (last token - request start) / output tokens (the first token included)",
)
INFERENCE_PERF = Definitions(
    latency="from the request's send to its last chunk",
    ttft="first chunk with text (an empty-text token event is skipped), from the send",
    itl="every gap between chunks with text, pooled",
    tpot="per request: (latency - TTFT) / (output tokens - 1)",
)
GENAI_BENCH = Definitions(
    latency="from the request's send to its end (e2e_latency)",
    ttft="first chunk with content, from the send",
    itl="per request: (latency - TTFT) / (output tokens - 1) (its TPOT)",
    tpot="per request: (latency - TTFT) / (output tokens - 1)",
)
PER_S_TO_MS = 1e3
OUR_NAMES = {"count": "count", "mean": "mean", "p50": "p50", "p90": "p90", "p95": "p95", "p99": "p99", "max": "max"}


def _one_json(fmt: str, files: dict[str, bytes], key: str) -> tuple[str, Any]:
    for name, data in files.items():
        if name.endswith(".json"):
            doc = load_json(fmt, name, data)
            if isinstance(doc, dict) and key in doc:
                return name, doc
    raise ImportRefused(fmt, ", ".join(files), f"no JSON file with field {key}")


def vllm(files: dict[str, bytes]) -> Run:
    """One `--save-result` file per request rate (several files: several levels); `--save-detailed` adds records."""
    fmt = TOOL_NAMES["vllm"]
    levels, model, started, settings = [], None, None, {}
    for name, data in sorted(files.items()):
        doc = load_json(fmt, name, data)
        if not isinstance(doc, dict):
            raise ImportRefused(fmt, name, "not a JSON object")
        rate_field = need(fmt, name, doc, "request_rate")
        rate = 0.0 if rate_field in ("inf", None) else number(fmt, name, doc, "request_rate")
        concurrency = doc.get("max_concurrency")
        completed, failed = int(number(fmt, name, doc, "completed")), int(doc.get("failed") or 0)
        records = []
        if "start_times" in doc:
            queue = doc.get("queue_times") or [None] * len(doc["start_times"])
            errors = doc.get("errors") or [""] * len(doc["start_times"])
            for i, (sent, ttft, itl, latency, out) in enumerate(
                zip(doc["start_times"], doc["ttfts"], doc["itls"], doc["latencies"], doc["output_lens"], strict=True)
            ):
                wait = queue[i]
                records.append(
                    Record(
                        sent_s=float(sent),
                        due_s=None if wait is None else float(sent) - float(wait),
                        ok=not errors[i],
                        latency_ms=PER_S_TO_MS * latency,
                        ttft_ms=PER_S_TO_MS * ttft,
                        itl_ms=tuple(PER_S_TO_MS * g for g in itl),
                        output_tokens=int(out),
                    )
                )

        duration = number(fmt, name, doc, "duration")
        level = Level(
            level=f"request rate {rate:g}" if rate else f"max concurrency {concurrency}",
            pattern="poisson" if rate and doc.get("burstiness", 1.0) == 1.0 else ("closed" if not rate else "constant"),
            rate=rate,
            concurrency=None if rate else concurrency,
            requests=completed + failed,
            ok=completed,
            duration_s=duration,
            achieved_rate=number(fmt, name, doc, "request_throughput"),
            latency=_vllm_figure(doc, "e2el", completed),
            ttft=_vllm_figure(doc, "ttft", completed),
            itl=_vllm_figure(doc, "itl", completed),
            tpot=_vllm_figure(doc, "tpot", completed),
            output_tokens_per_s=doc.get("output_throughput"),
            input_tokens_per_s=(doc.get("total_input_tokens") or 0) / duration if duration else None,
            records=records,
        )
        if level.latency is None:
            raise ImportRefused(fmt, name, "no end-to-end latency (run it with --percentile-metrics including e2el)")
        rate_behind(level)
        levels.append(level)
        model = doc.get("model_id") or model
        settings = {k: str(doc[k]) for k in _VLLM_SETTINGS if doc.get(k) is not None}
        if isinstance(doc.get("date"), str):
            started = datetime.strptime(doc["date"], "%Y%m%d-%H%M%S").replace(tzinfo=UTC)
    levels.sort(key=lambda lv: (lv.rate, lv.concurrency or 0))
    due = "its request's release by the arrival schedule, before the concurrency semaphore (vLLM's queue_times)"
    return Run("vllm", None, None, model, None, "llm", VLLM, levels, started, due_by=due, settings=settings)


# What else vLLM's result file says of how it ran.
_VLLM_SETTINGS = ("backend", "endpoint_type", "num_prompts", "burstiness", "max_concurrency", "tokenizer_id", "label")
# vLLM's saved quantiles (`--metric-percentiles`) by the names benchfleet gives them.
_VLLM_QUANTILES = {"mean": "mean", "p50": "p50", "p90": "p90", "p95": "p95", "p99": "p99", "p999": "p99.9"}


def _vllm_figure(doc: dict[str, Any], key: str, completed: int) -> dict[str, float] | None:
    found = {ours: float(doc[f"{theirs}_{key}_ms"]) for ours, theirs in _VLLM_QUANTILES.items() if f"{theirs}_{key}_ms" in doc}
    return {**found, "count": float(completed)} if found else None


def _aiperf_records(name: str, data: bytes) -> list[Record]:
    records = []
    for n, line in enumerate(data.decode().splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            meta, metrics = row["metadata"], row["metrics"]
        except (json.JSONDecodeError, KeyError, TypeError):
            raise ImportRefused(
                TOOL_NAMES["aiperf"], f"{name} line {n}", "not a per-request record (metadata, metrics)"
            ) from None
        if meta.get("benchmark_phase", "profiling") != "profiling":
            continue
        gaps = (metrics.get("inter_chunk_latency") or {}).get("value") or []
        records.append(
            Record(
                sent_s=meta["request_start_ns"] / 1e9,
                due_s=meta["credit_issued_ns"] / 1e9 if "credit_issued_ns" in meta else None,
                ok=row.get("error") is None,
                latency_ms=(metrics.get("request_latency") or {}).get("value"),
                ttft_ms=(metrics.get("time_to_first_token") or {}).get("value"),
                itl_ms=tuple(gaps) if isinstance(gaps, list) else (),
                output_tokens=(metrics.get("output_sequence_length") or {}).get("value"),
            )
        )
    return records


def aiperf(files: dict[str, bytes]) -> Run:
    """profile_export_aiperf.json (the summary), with profile_export.jsonl (per-request records) where given."""
    fmt = TOOL_NAMES["aiperf"]
    name, doc = _one_json(fmt, files, "aiperf_version")
    config = doc.get("input_config") or {}
    endpoint = config.get("endpoint") or {}
    phases = config.get("phases") or {}
    rate = 0.0
    concurrency = None
    for phase in phases.values() if isinstance(phases, dict) else []:
        if isinstance(phase, dict) and phase.get("request_rate"):
            rate = float(phase["request_rate"])
        if isinstance(phase, dict) and phase.get("concurrency"):
            concurrency = int(phase["concurrency"])
    command = (doc.get("run_info") or {}).get("cli_command")
    if not rate and command and "--request-rate" in command:
        rate = float(command.split("--request-rate", 1)[1].split()[0].strip("'\""))
    count = number(fmt, name, doc, "request_count", "avg")
    errors = sum(int(e.get("count", 0)) for e in doc.get("error_summary") or [] if isinstance(e, dict))
    names = {**OUR_NAMES, "count": "count"}
    level = Level(
        level=f"request rate {rate:g}" if rate else f"concurrency {concurrency}",
        pattern="poisson" if rate else "closed",
        rate=rate,
        concurrency=None if rate else concurrency,
        requests=int(count) + errors,
        ok=int(count),
        duration_s=number(fmt, name, doc, "benchmark_duration", "avg"),
        achieved_rate=number(fmt, name, doc, "request_throughput", "avg"),
        latency=scaled(need(fmt, name, doc, "request_latency"), 1.0, names),
        ttft=scaled(doc["time_to_first_token"], 1.0, names) if "time_to_first_token" in doc else None,
        itl=scaled(doc["inter_token_latency"], 1.0, names) if "inter_token_latency" in doc else None,
        output_tokens_per_s=(doc.get("output_token_throughput") or {}).get("avg"),
        input_tokens_per_s=(doc.get("input_token_throughput") or {}).get("avg"),
    )
    level.tpot = level.itl
    for other, data in files.items():
        if other.endswith(".jsonl"):
            level.records = _aiperf_records(other, data)
    rate_behind(level)
    urls = endpoint.get("urls") or [None]
    model = ((config.get("models") or {}).get("items") or [{}])[0].get("name")
    started = datetime.fromisoformat(doc["start_time"]).replace(tzinfo=UTC) if doc.get("start_time") else None
    due = "the credit its timing manager issued on schedule (credit_issued_ns)"
    return Run("aiperf", doc.get("aiperf_version"), command, model, urls[0], "llm", AIPERF, [level], started, due_by=due)


def guidellm(files: dict[str, bytes]) -> Run:
    """GuideLLM's benchmarks JSON: one benchmark per load level, its requests with their scheduled start."""
    fmt = TOOL_NAMES["guidellm"]
    name, doc = _one_json(fmt, files, "benchmarks")
    levels = []
    for i, bench in enumerate(doc["benchmarks"]):
        where = f"{name} benchmarks[{i}]"
        strategy = need(fmt, where, bench, "config", "strategy")
        kind = strategy.get("type_")
        rate = float(strategy.get("rate") or 0.0) if kind in ("constant", "poisson") else 0.0
        concurrency = strategy.get("streams") if kind == "concurrent" else None
        metrics = need(fmt, where, bench, "metrics")
        ok_reqs = need(fmt, where, bench, "requests", "successful")
        totals = need(fmt, where, metrics, "request_totals")
        records = []
        for req in ok_reqs:
            t = need(fmt, where, req, "info", "timings")
            first, last, start = t.get("first_token_iteration"), t.get("last_token_iteration"), t.get("request_start")
            end = t.get("request_end") or t.get("last_request_iteration")
            records.append(
                Record(
                    sent_s=start,
                    due_s=t.get("targeted_start"),
                    ok=True,
                    latency_ms=None if end is None or start is None else PER_S_TO_MS * (end - start),
                    ttft_ms=None if first is None or start is None else PER_S_TO_MS * (first - start),
                    output_tokens=req.get("output_tokens"),
                    itl_ms=() if first is None or last is None else _even_gaps(first, last, req.get("output_tokens")),
                )
            )

        def ms(key: str, scale: float, metrics: dict[str, Any] = metrics, where: str = where) -> dict[str, float] | None:
            stat = (metrics.get(key) or {}).get("successful")
            if not isinstance(stat, dict):
                return None
            return {
                **scaled(stat, scale, {"count": "count", "mean": "mean", "max": "max"}),
                **scaled(
                    stat.get("percentiles") or {}, scale, {"p50": "p50", "p90": "p90", "p95": "p95", "p99": "p99", "p999": "p999"}
                ),
            }

        level = Level(
            level=f"{kind} {rate:g} req/s" if rate else f"{kind}" + (f" {concurrency}" if concurrency else ""),
            pattern="poisson" if kind == "poisson" else ("constant" if rate else "closed"),
            rate=rate,
            concurrency=concurrency,
            requests=int(totals.get("total") or len(ok_reqs)),
            ok=int(totals.get("successful") or len(ok_reqs)),
            duration_s=number(fmt, where, bench, "duration"),
            achieved_rate=number(fmt, where, metrics, "requests_per_second", "successful", "mean"),
            latency=ms("request_latency", PER_S_TO_MS),
            ttft=ms("time_to_first_token_ms", 1.0),
            itl=ms("inter_token_latency_ms", 1.0),
            tpot=ms("time_per_output_token_ms", 1.0),
            output_tokens_per_s=((metrics.get("output_tokens_per_second") or {}).get("successful") or {}).get("mean"),
            records=records,
        )
        delay = (bench.get("scheduler_metrics") or {}).get("generation_delay") or {}
        for warning in bench.get("warnings") or []:
            if isinstance(warning, dict) and warning.get("message"):
                level.behind.append(f"GuideLLM warned: {warning['message']}")
        if not level.behind and isinstance(delay.get("mean"), int | float) and delay["mean"] > 0.001:
            level.behind.append(f"mean generation delay {1e3 * delay['mean']:.2f} ms")
        rate_behind(level)
        levels.append(level)
    meta = doc.get("metadata") or {}
    backend = ((doc.get("config") or {}).get("spec") or {}).get("backend") or {}
    started = datetime.fromtimestamp(doc["benchmarks"][0]["start_time"], UTC) if doc["benchmarks"] else None
    version, model, url = meta.get("guidellm_version"), backend.get("model"), backend.get("target")
    return Run(
        "guidellm", version, None, model, url, "llm", GUIDELLM, levels, started, due_by="its scheduled start (targeted_start)"
    )


def _even_gaps(first: float, last: float, tokens: Any) -> tuple[float, ...]:
    """GuideLLM keeps each request's first and last token time only: its ITL is their mean gap, one per token."""
    n = int(tokens or 0)
    return tuple([PER_S_TO_MS * (last - first) / (n - 1)] * (n - 1)) if n > 1 else ()


def inference_perf(files: dict[str, bytes]) -> Run:
    """inference-perf's stage_N_lifecycle_metrics.json files (one level each; the summary alone when no stage file
    is given), with its config.json where given."""
    fmt = TOOL_NAMES["inference-perf"]
    stages = {n: d for n, d in files.items() if n.startswith("stage_") and n.endswith(".json")}
    chosen = stages or {n: d for n, d in files.items() if "lifecycle_metrics" in n}
    if not chosen:
        raise ImportRefused(fmt, ", ".join(files), "no stage_N_lifecycle_metrics.json or summary_lifecycle_metrics.json")
    config = load_json(fmt, "config.json", files["config.json"]) if "config.json" in files else {}
    kind = (config.get("load") or {}).get("type", "poisson")
    levels = []
    for name, data in sorted(chosen.items(), key=lambda kv: kv[0]):
        doc = load_json(fmt, name, data)
        load = need(fmt, name, doc, "load_summary")
        lat = need(fmt, name, doc, "successes", "latency")
        ok = int(number(fmt, name, doc, "successes", "count"))
        failed = int(((doc.get("failures") or {}).get("count")) or 0)
        rate = float(load.get("requested_rate") or 0.0)
        names = {"mean": "mean", "p50": "median", "p90": "p90", "p95": "p95", "p99": "p99", "p999": "p99.9", "max": "max"}

        def stat(key: str, lat: dict[str, Any] = lat, ok: int = ok, names: dict[str, str] = names) -> dict[str, float] | None:
            return {**scaled(lat[key], PER_S_TO_MS, names), "count": float(ok)} if isinstance(lat.get(key), dict) else None

        level = Level(
            level=f"stage {name.split('_')[1]} ({rate:g} req/s)" if name.startswith("stage_") else f"{rate:g} req/s",
            pattern="poisson" if kind == "poisson" else "constant",
            rate=rate,
            concurrency=None,
            requests=ok + failed,
            ok=ok,
            duration_s=number(fmt, name, doc, "benchmark_time_seconds"),
            achieved_rate=float(load.get("achieved_rate") or 0.0),
            latency=stat("request_latency"),
            ttft=stat("time_to_first_token"),
            itl=stat("inter_token_latency"),
            tpot=stat("time_per_output_token"),
            output_tokens_per_s=(doc.get("successes") or {}).get("throughput", {}).get("output_tokens_per_sec"),
        )
        delay = load.get("schedule_delay") or {}
        if isinstance(delay.get("p99"), int | float) and delay["p99"] > 0.001:
            level.behind.append(f"schedule delay p99 {1e3 * delay['p99']:.2f} ms (mean {1e3 * delay.get('mean', 0):.2f} ms)")
        rate_behind(level)
        levels.append(level)
    server = config.get("server") or {}
    settings = {k: json.dumps(config[k]) for k in ("load", "api", "data") if config.get(k)}
    model, url = server.get("model_name"), server.get("base_url")
    return Run("inference-perf", None, None, model, url, "llm", INFERENCE_PERF, levels, settings=settings)


def genai_bench(files: dict[str, bytes]) -> Run:
    """genai-bench's experiment folder: one JSON per scenario and concurrency (aggregated and per-request metrics),
    with experiment_metadata.json where given."""
    fmt = TOOL_NAMES["genai-bench"]
    meta = (
        load_json(fmt, "experiment_metadata.json", files["experiment_metadata.json"])
        if "experiment_metadata.json" in files
        else {}
    )
    levels = []
    for name, data in sorted(files.items()):
        if name == "experiment_metadata.json" or not name.endswith(".json"):
            continue
        doc = load_json(fmt, name, data)
        agg = need(fmt, name, doc, "aggregated_metrics")
        scale = PER_S_TO_MS if doc.get("_time_unit", "s") == "s" else 1.0
        individual = need(fmt, name, doc, "individual_request_metrics")
        ok = [r for r in individual if isinstance(r, dict) and not r.get("error_code")]
        records = [
            Record(
                sent_s=None,
                due_s=None,
                ok=True,
                latency_ms=scale * r["e2e_latency"],
                ttft_ms=scale * r["ttft"],
                output_tokens=r.get("num_output_tokens"),
            )
            for r in ok
            if isinstance(r.get("e2e_latency"), int | float) and isinstance(r.get("ttft"), int | float)
        ]
        concurrency = int(number(fmt, name, agg, "num_concurrency"))
        tpots = [scale * r["tpot"] for r in ok if isinstance(r.get("tpot"), int | float)]
        level = Level(
            level=f"{agg.get('scenario', '')} concurrency {concurrency}".strip(),
            pattern="closed",
            rate=0.0,
            concurrency=concurrency,
            requests=int(number(fmt, name, agg, "num_requests")),
            ok=int(number(fmt, name, agg, "num_completed_requests")),
            duration_s=number(fmt, name, agg, "run_duration"),
            achieved_rate=number(fmt, name, agg, "requests_per_second"),
            latency=stats_of([r.latency_ms for r in records if r.latency_ms is not None]),
            ttft=stats_of([r.ttft_ms for r in records if r.ttft_ms is not None]),
            tpot=stats_of(tpots),
            itl=stats_of(tpots),
            output_tokens_per_s=agg.get("mean_output_throughput_tokens_per_s"),
            input_tokens_per_s=agg.get("mean_input_throughput_tokens_per_s"),
            records=records,
        )
        levels.append(level)
    if not levels:
        raise ImportRefused(fmt, ", ".join(files), "no result JSON (aggregated_metrics, individual_request_metrics)")
    levels.sort(key=lambda lv: lv.concurrency or 0)
    version = meta.get("benchmark_version")
    settings = {k: str(meta[k]) for k in ("task", "traffic_scenario", "server_engine", "iteration_type") if meta.get(k)}
    return Run(
        "genai-bench", version, meta.get("cmd"), meta.get("api_model_name"), None, "llm", GENAI_BENCH, levels, settings=settings
    )
