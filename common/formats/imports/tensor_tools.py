"""Readers of perf_analyzer's CSV (`-f`) and MLPerf LoadGen's logs (mlperf_log_summary.txt, mlperf_log_detail.txt)."""

from __future__ import annotations

import csv
import io
import json
import re
from typing import Any

from common.formats.imports.model import ImportRefused, Level, Run
from common.wire.imports import TOOL_NAMES, Definitions

PERF_ANALYZER = Definitions(
    latency="from the request's send to its answer (not from the scheduled time; a delayed request's wait is not in it)",
)
LOADGEN = Definitions(
    latency="from the query's scheduled issue to its completion (LoadGen's clock)",
    ttft="from the query's scheduled issue to the first token the system under test reported",
    tpot="per query: (completion - first token) / (output tokens - 1)",
)
US_TO_MS = 1e-3
NS_TO_MS = 1e-6


def perf_analyzer(files: dict[str, bytes]) -> Run:
    """One CSV row per concurrency or request-rate level; latencies in µs, p50/p90/p95/p99 only."""
    fmt = TOOL_NAMES["perf_analyzer"]
    name, data = next(iter(files.items()))  # its one CSV (read() refuses an import without a file)
    try:
        rows = list(csv.DictReader(io.StringIO(data.decode())))
    except UnicodeDecodeError:
        raise ImportRefused(fmt, name, "not UTF-8 text") from None
    if not rows or "Inferences/Second" not in rows[0]:
        raise ImportRefused(fmt, f"{name} line 1", "no Inferences/Second column (write it with perf_analyzer -f)")
    by_rate = "Request Rate" in rows[0]
    levels = []
    for n, row in enumerate(rows, 2):
        try:
            load = float(row["Request Rate" if by_rate else "Concurrency"])
            achieved = float(row["Inferences/Second"])
            latency = {q: US_TO_MS * float(row[f"{q} latency"]) for q in ("p50", "p90", "p95", "p99")}
        except (KeyError, ValueError, TypeError) as exc:
            raise ImportRefused(fmt, f"{name} line {n}", f"column {exc} missing or not a number") from None
        level = Level(
            level=f"request rate {load:g}" if by_rate else f"concurrency {load:g}",
            pattern="constant" if by_rate else "closed",
            rate=load if by_rate else 0.0,
            concurrency=None if by_rate else int(load),
            requests=0,
            ok=0,
            duration_s=0.0,
            achieved_rate=achieved,
            latency={**latency, "count": 0.0},
        )
        if by_rate and achieved < 0.95 * load:
            level.behind.append(f"achieved {achieved:.4g} inferences/s of the {load:g} requested")
        levels.append(level)
    # The CSV does not say how requests were spread in time: perf_analyzer's default is stated as such.
    settings = {"request distribution": "not in the CSV (perf_analyzer's default is constant)"} if by_rate else {}
    return Run("perf_analyzer", None, None, None, None, "tensor", PERF_ANALYZER, levels, settings=settings)


SUMMARY_NUMBER = re.compile(r"^\s*(?P<key>[^:]+?)\s*:\s*(?P<value>-?[\d.]+(?:e[+-]?\d+)?)\s*$")


def loadgen(files: dict[str, bytes]) -> Run:
    """The summary's figures (ns) of its one scenario; the detail log for LoadGen's version and settings."""
    fmt = TOOL_NAMES["loadgen"]
    summary = next((d.decode(errors="replace") for n, d in files.items() if "summary" in n), None)
    if summary is None or "MLPerf Results Summary" not in summary:
        raise ImportRefused(fmt, ", ".join(files), "no mlperf_log_summary.txt (its first lines say 'MLPerf Results Summary')")
    values: dict[str, float] = {}
    texts: dict[str, str] = {}
    for line in summary.splitlines():
        m = SUMMARY_NUMBER.match(line)
        if m:
            values.setdefault(m["key"].lower(), float(m["value"]))
        elif ":" in line:
            key, _, value = line.partition(":")
            texts.setdefault(key.strip().lower(), value.strip())
    scenario = texts.get("scenario", "")

    def stat(prefix: str, word: str) -> dict[str, float] | None:
        keys = {"p50": "50.00", "p90": "90.00", "p95": "95.00", "p99": "99.00", "p999": "99.90"}
        out = {
            q: NS_TO_MS * values[f"{pct} percentile {word} (ns)"]
            for q, pct in keys.items()
            if f"{pct} percentile {word} (ns)" in values
        }
        for ours, theirs in (("mean", f"mean {prefix} (ns)"), ("max", f"max {prefix} (ns)")):
            if theirs in values:
                out[ours] = NS_TO_MS * values[theirs]
        return out or None

    latency = stat("latency", "latency")
    if latency is None or "p99" not in latency:
        raise ImportRefused(fmt, "mlperf_log_summary.txt", "no '99.00 percentile latency (ns)' line")
    target = values.get("target_qps", 0.0)
    completed = values.get("completed samples per second", values.get("samples per second", 0.0))
    settings = {"scenario": scenario, "mode": texts.get("mode", ""), "result": texts.get("result is", "")}
    detail = next((_detail(n, d) for n, d in files.items() if "detail" in n), {})
    queries = int(detail.get("result_query_count", 0))
    level = Level(
        level=f"{scenario} {target:g} queries/s" if target else scenario,
        pattern="poisson" if scenario == "Server" else "closed",
        rate=target if scenario == "Server" else 0.0,
        concurrency=None if scenario == "Server" else 1,
        requests=queries,
        ok=queries - int(detail.get("num_errors", 0)),
        duration_s=float(detail.get("generated_query_duration", 0)) / 1e9,
        achieved_rate=completed,
        latency={**latency, "count": float(queries)},
        ttft=stat("first token latency", "first token latency"),
        tpot=stat("time per output token", "time to output token"),
        output_tokens_per_s=values.get("completed tokens per second"),
    )
    if texts.get("result is", "").upper() == "INVALID":
        failed = [k for k, v in texts.items() if v.upper().startswith("NO") and "satisfied" in k]
        level.behind.append(f"LoadGen's result is INVALID ({', '.join(failed) or 'its summary says why'})")
    scheduled = values.get("scheduled samples per second")
    if scheduled and target and scheduled < 0.95 * target:
        level.behind.append(f"scheduled {scheduled:.3g} queries/s of the {target:g} targeted")
    version = str(detail["loadgen_version"]).split(" @ ")[0] if "loadgen_version" in detail else None
    return Run(
        "loadgen",
        version,
        None,
        texts.get("sut name"),
        None,
        "llm" if level.ttft else "tensor",
        LOADGEN,
        [level],
        settings=settings,
    )


def _detail(name: str, data: bytes) -> dict[str, Any]:
    """The detail log's entries, key to value (the last of a key wins)."""
    out: dict[str, Any] = {}
    for n, line in enumerate(data.decode(errors="replace").splitlines(), 1):
        if not line.startswith(":::MLLOG "):
            raise ImportRefused(TOOL_NAMES["loadgen"], f"{name} line {n}", "not a ':::MLLOG {json}' line")
        try:
            entry = json.loads(line[len(":::MLLOG ") :])
        except json.JSONDecodeError:
            raise ImportRefused(TOOL_NAMES["loadgen"], f"{name} line {n}", "its JSON does not parse") from None
        if isinstance(entry, dict) and "key" in entry:
            out[str(entry["key"])] = entry.get("value")
    return out
