"""Write deploy/grafana/dashboards/benchfleet.json: the Grafana dashboard over the leader's and followers' metrics."""

from __future__ import annotations

import json
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "deploy" / "grafana" / "dashboards" / "benchfleet.json"

# (title, unit, [(PromQL, legend)])
PANELS: list[tuple[str, str, list[tuple[str, str]]]] = [
    ("Jobs by state", "short", [("benchfleet_leader_jobs", "{{state}}")]),
    ("Queue per follower (jobs)", "short", [("benchfleet_leader_follower_queue_jobs", "{{follower_id}}")]),
    ("Queue per follower (estimated seconds)", "s", [("benchfleet_leader_follower_queue_seconds", "{{follower_id}}")]),
    ("Followers by state", "short", [("benchfleet_leader_followers", "{{state}}")]),
    (
        "Placement latency p50 / p99",
        "s",
        [
            ("histogram_quantile(0.5, sum(rate(benchfleet_leader_placement_seconds_bucket[5m])) by (le))", "p50"),
            ("histogram_quantile(0.99, sum(rate(benchfleet_leader_placement_seconds_bucket[5m])) by (le))", "p99"),
        ],
    ),
    (
        "API latency p99 by route",
        "s",
        [
            ("histogram_quantile(0.99, sum(rate(benchfleet_leader_api_request_seconds_bucket[5m])) by (le, route))", "{{route}}"),
        ],
    ),
    ("Running point", "short", [("benchfleet_follower_running_point", "{{instance}}")]),
    (
        "Generator rate (target / achieved)",
        "reqps",
        [
            ("benchfleet_follower_generator_target_rate", "target {{instance}}"),
            ("benchfleet_follower_generator_achieved_rate", "achieved {{instance}}"),
        ],
    ),
    ("Generator send lag", "s", [("benchfleet_follower_generator_send_lag_seconds", "p{{percentile}} {{instance}}")]),
    ("Server CPU", "percent", [("benchfleet_follower_server_cpu_percent", "{{proc}} {{instance}}")]),
    ("Server RSS", "bytes", [("benchfleet_follower_server_rss_bytes", "{{proc}} {{instance}}")]),
    ("GPU utilisation", "percent", [("benchfleet_follower_gpu_utilization_percent", "gpu {{gpu}} {{instance}}")]),
    ("GPU memory used", "bytes", [("benchfleet_follower_gpu_memory_used_bytes", "gpu {{gpu}} {{instance}}")]),
    ("GPU power", "watt", [("benchfleet_follower_gpu_power_watts", "gpu {{gpu}} {{instance}}")]),
]


def dashboard() -> dict:
    """The dashboard model (Grafana schema version 39)."""
    panels = []
    for i, (title, unit, targets) in enumerate(PANELS):
        panels.append(
            {
                "id": i + 1,
                "type": "timeseries",
                "title": title,
                "datasource": {"type": "prometheus", "uid": "${datasource}"},
                "gridPos": {"h": 8, "w": 12, "x": 12 * (i % 2), "y": 8 * (i // 2)},
                "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
                "targets": [
                    {"refId": chr(65 + j), "expr": expr, "legendFormat": legend} for j, (expr, legend) in enumerate(targets)
                ],
            }
        )
    return {
        "uid": "benchfleet",
        "title": "benchfleet",
        "tags": ["benchfleet"],
        "timezone": "utc",
        "schemaVersion": 39,
        "version": 1,
        "refresh": "5s",
        "time": {"from": "now-1h", "to": "now"},
        "panels": panels,
        # The Prometheus data source is chosen on the dashboard (any the Grafana knows), never pinned to one uid.
        "templating": {
            "list": [
                {
                    "name": "datasource",
                    "label": "Prometheus",
                    "type": "datasource",
                    "query": "prometheus",
                    "current": {},
                    "hide": 0,
                    "refresh": 1,
                }
            ]
        },
    }


def render() -> str:
    """The dashboard as committed JSON text."""
    return json.dumps(dashboard(), indent=2) + "\n"


if __name__ == "__main__":
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(render())
    sys.stdout.write(f"wrote {OUT}\n")
