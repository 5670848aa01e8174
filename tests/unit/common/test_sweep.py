"""Sweeps over server options: every combination a configuration with its own server start, crossed with the grid;
the search inside it per configuration; bad sweeps refused naming the option and the value."""

from __future__ import annotations

from typing import Any

import pytest

from common.errors import InvalidSpec
from common.spec.grid import estimate_seconds, expand, server_runs, server_starts
from common.spec.parse import parse_spec
from common.spec.server import DynamicBatching
from common.spec.sweep import describe, label

BASE: dict[str, Any] = {
    "name": "s",
    "model": "m:1",
    "backends": ["onnxruntime"],
    "batch_sizes": [1, 4],
    "load": {"rate": [10, 20], "duration": "2s", "warmup": "1s"},
}


def test_every_combination_is_a_configuration_with_its_own_server_start() -> None:
    spec = parse_spec({**BASE, "sweep": {"threads": [1, 2], "dynamic_batching.max_queue_delay_us": [0, 500]}})
    points = expand(spec)
    assert len(points) == 2 * 2 * 2 * 2 and server_starts(spec) == 4
    runs = server_runs(points, fresh_server=False)
    assert [len(run) for run in runs] == [4, 4, 4, 4]
    # Each run shares one configuration; the configurations are the cross product, the last option fastest.
    configs = [(run[0].server.threads, run[0].server.dynamic_batching.max_queue_delay_us) for run in runs]  # type: ignore[union-attr]
    assert configs == [(1, 0), (1, 500), (2, 0), (2, 500)]
    assert all(p.server == run[0].server for run in runs for p in run)
    assert [label(spec.sweep, run[0].server) for run in runs][1] == "threads=1 max_queue_delay_us=500"
    assert describe(runs[3][0].server) == "dynamic_batching.max_queue_delay_us=500 threads=2"
    # The estimate counts a server start per configuration.
    plain = parse_spec(BASE)
    assert estimate_seconds(spec) > 4 * estimate_seconds(plain) - 0.01


def test_dynamic_batching_swept_whole_is_the_on_versus_off_study() -> None:
    on = {"max_batch_size": 16, "max_queue_delay_us": 20000}
    spec = parse_spec({**BASE, "batch_sizes": [1], "sweep": {"dynamic_batching": [None, on]}})
    runs = server_runs(expand(spec), fresh_server=False)
    assert [run[0].server.dynamic_batching for run in runs] == [None, DynamicBatching(**on)]
    assert [label(spec.sweep, run[0].server) for run in runs] == [
        "dynamic_batching=off",
        "dynamic_batching=(max_batch_size=16,max_queue_delay_us=20000)",
    ]
    with pytest.raises(InvalidSpec, match="whole .* or by its fields, not both"):
        parse_spec({**BASE, "sweep": {"dynamic_batching": [None, on], "dynamic_batching.max_batch_size": [4, 8]}})
    with pytest.raises(InvalidSpec, match="max_batch_size"):
        parse_spec({**BASE, "sweep": {"dynamic_batching": [None, {"max_batch_size": 0}]}})


def test_repeats_run_within_each_configurations_server() -> None:
    spec = parse_spec(
        {
            **BASE,
            "batch_sizes": [1],
            "load": {"rate": 10},
            "sweep": {"llm.max_num_seqs": [4, 8]},
            "backends": ["vllm"],
            "repeats": 3,
        }
    )
    runs = server_runs(expand(spec), fresh_server=False)
    assert [[p.repeat for p in run] for run in runs] == [[0, 1, 2], [0, 1, 2]]
    assert [run[0].server.llm.max_num_seqs for run in runs] == [4, 8]


def test_a_search_sits_inside_a_sweep_one_answer_per_configuration() -> None:
    spec = parse_spec(
        {
            **BASE,
            "batch_sizes": [1],
            "slo": {"p99_ms": 20},
            "load": {"pattern": "poisson", "search": {"low": 10, "high": 100}},
            "sweep": {"threads": [1, 2]},
        }
    )
    points = expand(spec)
    assert [(p.server.threads, p.search is not None) for p in points] == [(1, True), (2, True)]


@pytest.mark.parametrize(
    ("sweep", "message"),
    [
        ({"protocol": ["http", "grpc"]}, "cannot sweep 'protocol'"),
        ({"threads": [1, 0]}, "threads: must be > 0 (in the combination {'threads': 0})"),
        ({"threads": [1, 1]}, "threads: must not repeat a value"),
        ({"threads": []}, "threads: must be a list of 1 to 16 values"),
        ({"llm.dtype": ["auto", "int3"]}, "llm.dtype"),
    ],
)
def test_a_bad_sweep_is_refused_naming_the_option(sweep: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidSpec) as err:
        parse_spec({**BASE, "sweep": sweep})
    assert err.value.field == "sweep" and message in str(err.value), str(err.value)


def test_a_sweep_needs_a_server_benchfleet_starts_and_fits_the_grid_limit() -> None:
    with pytest.raises(InvalidSpec, match="not with a target or colocate"):
        parse_spec(
            {
                "name": "t",
                "model": "m:1",
                "load": {"rate": 10},
                "sweep": {"threads": [1, 2]},
                "target": {"url": "http://127.0.0.1:1", "protocol": "kserve-http"},
            }
        )
    with pytest.raises(InvalidSpec, match="grid has 1024 points"):
        parse_spec({**BASE, "load": {"rate": list(range(1, 17))}, "sweep": {"threads": list(range(1, 17)), "instances": [1, 2]}})
