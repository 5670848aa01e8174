"""`benchfleet import FILE…`: another tool's result files (one run: vllm bench serve, AIPerf, GuideLLM,
inference-perf, genai-bench, perf_analyzer, MLPerf LoadGen) become a job of kind `imported`; its results are shown
with the tool's definitions and no verdict of benchfleet's."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from benchfleet.cli_common import DEFAULT_URL, TokenOpt, UrlOpt, call, client_for, console
from benchfleet.render import print_results
from common.wire.imports import TOOL_NAMES


def register(app: typer.Typer) -> None:
    """Adds `import` to the CLI."""

    @app.command("import")
    def import_cmd(
        files: Annotated[list[Path], typer.Argument(exists=True, dir_okay=False, readable=True, help="the run's result files")],
        tool: Annotated[str | None, typer.Option(help=f"one of {', '.join(TOOL_NAMES)} (default: recognised)")] = None,
        name: Annotated[str | None, typer.Option(help="the job's name (default: TOOL-import)")] = None,
        model: Annotated[str | None, typer.Option(help="the model's name (default: as the files name it)")] = None,
        url: UrlOpt = DEFAULT_URL,
        token: TokenOpt = "",
    ) -> None:
        """Import another tool's result files as a job (one point per load level), then show its results."""
        with client_for(url, token) as client:
            summary = call(client.import_files, files, tool=tool, name=name, model=model)
            results = call(client.results, summary.job_id)
        version = f" {summary.version}" if summary.version else ""
        console.print(
            f"imported {TOOL_NAMES[summary.tool]}{version}: job {summary.job_id}, {summary.points} points", markup=False
        )
        print_results(console, results)
