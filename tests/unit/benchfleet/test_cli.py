"""CLI behaviour scripts rely on: exit codes and one-line errors."""

from __future__ import annotations

from typer.testing import CliRunner

from benchfleet.cli import app
from benchfleet.cli_common import EXIT_UNREACHABLE, EXIT_USAGE
from common.procs import free_port


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


def test_version_and_completion() -> None:
    from importlib.metadata import version

    runner = CliRunner()
    shown = runner.invoke(app, ["--version"])
    assert shown.exit_code == 0 and shown.output.strip() == f"benchfleet {version('benchfleet')}"
    assert "--install-completion" in runner.invoke(app, ["--help"]).output
