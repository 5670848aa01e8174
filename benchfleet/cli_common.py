"""What every CLI command shares: the exit codes, the consoles, the --url/--token options, and one way to call the
leader that turns its refusals and absence into one line on stderr and an exit code."""

from __future__ import annotations

from typing import Annotated, NoReturn

import httpx
import typer
from rich.console import Console

from benchfleet.client import ApiError, BenchfleetClient

# Exit codes scripts can rely on (documented in the README and in `benchfleet --help`).
EXIT_OK, EXIT_JOB_FAILED, EXIT_USAGE, EXIT_API, EXIT_UNREACHABLE = 0, 1, 2, 3, 4
EXIT_CODES_HELP = "Exit codes: 0 ok, 1 job failed or cancelled, 2 bad usage, 3 the API refused, 4 leader unreachable."

console = Console()
err_console = Console(stderr=True)

UrlOpt = Annotated[str, typer.Option("--url", envvar="BENCHFLEET_URL", help="Leader base URL.")]
TokenOpt = Annotated[str, typer.Option("--token", envvar="BENCHFLEET_TOKEN", help="API token.", show_default=False)]


def fail(message: str, code: int) -> NoReturn:
    """One line on stderr, then the exit code."""
    err_console.print(f"error: {message}", markup=False, highlight=False, soft_wrap=True)  # one line, never wrapped
    raise typer.Exit(code)


def client_for(url: str, token: str) -> BenchfleetClient:
    """A client of the leader at `url` (a usage error without a token)."""
    if not token:
        fail("no API token: pass --token or set BENCHFLEET_TOKEN", EXIT_USAGE)
    return BenchfleetClient(url, token)


def call(fn, *args, **kwargs):
    """Run a client call, turning API and connection errors into one line and an exit code."""
    try:
        return fn(*args, **kwargs)
    except ApiError as exc:
        fail(str(exc), EXIT_API)
    except httpx.TransportError as exc:
        fail(f"cannot reach the leader: {exc}", EXIT_UNREACHABLE)
