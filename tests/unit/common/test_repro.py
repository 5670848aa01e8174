"""The reproducibility record: the configuration hash moves with what decides a number and with nothing else, and the
"comparable?" verdict names what differs (two results that differ only in kernel are "not comparable: kernel"), on
results, on leaderboard rows (compare's) and for results stored before the record existed."""

from __future__ import annotations

from datetime import UTC, datetime

from common.spec.grid import expand
from common.spec.parse import parse_spec
from common.wire.repro import comparable, config_hash
from common.wire.results import Environment, PointResult
from leader.analysis.compare import comparability
from leader.store.leaderboard import row_from_result

SPEC = {"name": "j", "model": "m:1", "load": {"rate": [10, 20], "duration": "2s"}, "repeats": 2}
RECORD = {
    "os": "Debian GNU/Linux 12 (bookworm)",
    "kernel": "6.1.0-18-amd64",
    "cpu_governor": "performance",
    "packages": {"onnxruntime": "1.32.0", "numpy": "2.4.6"},
}


def _env(**changes: object) -> Environment:
    host = {"follower_id": "f1", "host": "h1", "cpu_model": "EPYC 9654", "cpu_count": 16, "gpus": ["NVIDIA H100"]}
    versions = {"python": "3.11.7", "benchfleet": "0.1.0", "backend_version": "onnxruntime 1.32.0"}
    base = Environment.model_validate({**host, **versions, "seed": 1, "config_hash": "c" * 64, **RECORD})
    return base.model_copy(update=changes)


def _result(env: Environment) -> PointResult:
    (point, *_) = expand(parse_spec(SPEC))
    counts = {"measured_s": 2.0, "requests": 100, "ok": 100, "errors": 0, "offered_rate": 10.0, "achieved_rate": 10.0}
    empty = {"latency_ms": None, "service_ms": None, "send_lag_ms": None, "cold_start": None}
    return PointResult.model_validate(
        {"point": point, "started_at": datetime.now(UTC), **counts, **empty, "valid": True, "environment": env}
    )


def test_the_configuration_hash_moves_with_what_decides_the_number_and_nothing_else() -> None:
    points = expand(parse_spec(SPEC))
    first, second = (p for p in points if p.rate == 10)  # two runs of one configuration: other index, seed, repeat
    assert (first.index, first.seed, first.repeat) != (second.index, second.seed, second.repeat)

    def digest(point: object, model: str = "a" * 64, data: str | None = None, version: str = "0.1.0") -> str:
        return config_hash(point, model_sha256=model, data_sha256=data, benchfleet=version)  # type: ignore[arg-type]

    assert digest(first) == digest(second)
    other_rate = next(p for p in points if p.rate == 20)
    threads = first.model_copy(update={"server": first.server.model_copy(update={"threads": 4})})
    assert len({digest(first), digest(other_rate), digest(threads), digest(first, model="b" * 64)}) == 4
    assert len({digest(first), digest(first, data="d" * 64), digest(first, version="0.2.0")}) == 3


def test_two_results_that_differ_only_in_kernel_are_not_comparable_naming_it() -> None:
    same = comparable(_result(_env()), _result(_env(host="h2", follower_id="f2", seed=7)))
    assert same.comparable and same.verdict() == "comparable"  # another host of the same kind, another run's seed
    kernel = comparable(_result(_env()), _result(_env(kernel="6.8.0-31-generic")))
    assert not kernel.comparable and kernel.verdict() == "not comparable: kernel"
    several = comparable(_result(_env()), _result(_env(config_hash="d" * 64, packages={"onnxruntime": "1.31.0"})))
    assert several.verdict() == "not comparable: configuration, packages"


def test_a_result_stored_before_the_record_is_unknown_where_it_says_nothing_and_compared_where_it_does() -> None:
    old = _env(config_hash=None, os=None, kernel=None, cpu_governor=None, packages={})
    verdict = comparable(_result(_env()), _result(old))
    assert verdict.comparable and verdict.unknown == ["configuration", "cpu_governor", "os", "kernel", "packages"]
    assert verdict.verdict().startswith("comparable (not recorded: configuration")
    assert comparable(_result(_env()), _result(old.model_copy(update={"cpu_model": "Xeon"}))).differs == ["cpu_model"]


def test_compare_reads_the_verdict_from_the_rows_environment() -> None:
    def row(env: Environment) -> dict[str, object]:
        doc = _result(env).model_dump(mode="json")
        return row_from_result(job_id="j", job_name="j", model="m:1", slo_p99_ms=None, attempt=1, result=doc)

    assert comparability(row(_env()), row(_env(kernel="6.8.0"))) == "not comparable: kernel"
    assert comparability(row(_env()), row(_env())) == "comparable"
    assert comparability(row(_env()), None) is None
    stored_before = row(_env())
    del stored_before["environment"]
    assert comparability(row(_env()), stored_before) is None
