"""CLI behaviour scripts rely on: exit codes and one-line errors."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from typer.testing import CliRunner

from benchfleet.cli import app
from benchfleet.cli_common import (
    EXIT_NOT_COMPARABLE,
    EXIT_OK,
    EXIT_REGRESSION,
    EXIT_UNREACHABLE,
    EXIT_USAGE,
    leader_url,
)
from common.procs import free_port
from common.wire.analysis import CompareResponse, PointComparison
from tests.http_stub import answering


def test_unreachable_leader_is_exit_4_with_one_line() -> None:
    result = CliRunner().invoke(app, ["jobs", "--url", f"http://127.0.0.1:{free_port()}", "--token", "x" * 20])
    assert result.exit_code == EXIT_UNREACHABLE
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: cannot reach the leader")


def test_usage_errors_are_exit_2_and_name_the_option() -> None:
    runner = CliRunner()
    no_token = runner.invoke(app, ["jobs"], env={"BENCHFLEET_TOKEN": ""})
    assert no_token.exit_code == EXIT_USAGE and "BENCHFLEET_TOKEN" in no_token.output
    bad_filter = runner.invoke(app, ["leaderboard", "--token", "x" * 20, "--filter", "backend"])
    assert bad_filter.exit_code == EXIT_USAGE and "--filter" in bad_filter.output
    bad_format = runner.invoke(app, ["results", "j1", "--token", "x" * 20, "--format", "xml"])
    assert bad_format.exit_code == EXIT_USAGE and "--format" in bad_format.output


def test_a_url_without_a_scheme_is_a_usage_error_and_the_apis_own_path_is_dropped() -> None:
    runner = CliRunner()
    bare = runner.invoke(app, ["jobs", "--url", "127.0.0.1:8700", "--token", "x" * 20])
    assert bare.exit_code == EXIT_USAGE and "--url '127.0.0.1:8700' needs http:// or https://" in bare.output
    assert leader_url("http://127.0.0.1:8700/api/v1/") == leader_url("http://127.0.0.1:8700") == "http://127.0.0.1:8700"
    assert leader_url("https://bench.example/team/api/v1") == "https://bench.example/team"


def test_up_on_a_taken_port_is_a_usage_error_naming_the_option(tmp_path: Path) -> None:
    """A port someone else listens on is the user's to change (exit 2 naming --port), not an unreachable leader."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = CliRunner().invoke(app, ["up", "--port", str(port), "--workdir", str(tmp_path / "fleet")])
    assert result.exit_code == EXIT_USAGE, result.output
    assert f"--port {port} is taken" in result.output and not (tmp_path / "fleet" / "up.log").exists()


def test_version_and_completion() -> None:
    from importlib.metadata import version

    runner = CliRunner()
    shown = runner.invoke(app, ["--version"])
    assert shown.exit_code == 0 and shown.output.strip() == f"benchfleet {version('benchfleet')}"
    assert "--install-completion" in runner.invoke(app, ["--help"]).output


def _point(verdict: str, *, b_valid: bool = True) -> PointComparison:
    return PointComparison(
        key="onnxruntime|b1|poisson|100 req/s",
        a_index=0,
        b_index=0,
        a_p99_ms=10.0,
        b_p99_ms=30.0,
        change=2.0,
        ci_low=None,
        ci_high=None,
        p_value=None,
        test="summary",
        verdict=verdict,  # type: ignore[arg-type]
        a_valid=True,
        b_valid=b_valid,
        b_reasons=[] if b_valid else ["send lag p99 2.1 ms > 1 ms"],
    )


@pytest.mark.parametrize(
    ("points", "regressions", "invalid", "code"),
    [
        ([("unchanged", True)], 0, 0, EXIT_OK),
        ([("regression", True)], 1, 0, EXIT_REGRESSION),
        ([("invalid", False)], 0, 1, EXIT_NOT_COMPARABLE),
        ([("regression", True), ("invalid", False)], 1, 1, EXIT_REGRESSION),
    ],
)
def test_compare_exits_on_a_regression_between_valid_points_else_on_a_point_it_could_not_judge(
    points: list[tuple[str, bool]], regressions: int, invalid: int, code: int
) -> None:
    compared = [_point(v, b_valid=ok) for v, ok in points]
    answer = CompareResponse(a="a1", b="b1", threshold=0.1, points=compared, regressions=regressions, invalid=invalid)
    with answering(answer.model_dump_json().encode()) as url:
        result = CliRunner().invoke(app, ["compare", "a1", "b1", "--url", url, "--token", "x" * 20, "--wide"])
    assert result.exit_code == code, result.output
    shown = " ".join(result.output.split())
    assert ("B's point is invalid: send lag p99 2.1 ms > 1 ms" in shown) == bool(invalid), result.output
    assert ("1 point(s) not judged" in shown) == bool(invalid), result.output
