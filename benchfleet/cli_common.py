"""What every CLI command shares: the exit codes, the consoles, the --url/--token options, and one way to call the
leader that turns its refusals and absence into one line on stderr and an exit code."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Annotated, Any, NoReturn

import httpx
import typer
from pydantic import BaseModel
from rich.console import Console

from benchfleet.client import ApiError, BenchfleetClient
from benchfleet.tables import Sheet, print_sheet
from benchfleet.up import DEFAULT_PORT

# Exit codes scripts can rely on (documented in docs/running.md and in `benchfleet --help`).
EXIT_OK, EXIT_JOB_FAILED, EXIT_USAGE, EXIT_API, EXIT_UNREACHABLE, EXIT_REGRESSION = 0, 1, 2, 3, 4, 5
EXIT_NOT_COMPARABLE = 6
EXIT_CODES_HELP = (
    "Exit codes: 0 ok, 1 job failed or cancelled, 2 bad usage, 3 the API refused, 4 leader unreachable, "
    "5 compare found a regression, 6 compare found none but could not judge a point (a side's point is invalid)."
)

# soft_wrap: a message is one line in a log, whatever width a pipe is given (a terminal wraps it itself).
console = Console(soft_wrap=True)
err_console = Console(stderr=True)

# Where the CLI finds the leader unless --url or BENCHFLEET_URL says otherwise: the one `benchfleet up` starts.
DEFAULT_URL = f"http://127.0.0.1:{DEFAULT_PORT}"
UrlOpt = Annotated[str, typer.Option("--url", envvar="BENCHFLEET_URL", help="Leader base URL.")]
TokenOpt = Annotated[str, typer.Option("--token", envvar="BENCHFLEET_TOKEN", help="API token.", show_default=False)]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print the leader's JSON instead of a table.")]
WideOpt = Annotated[bool, typer.Option("--wide", help="Show every column, however wide the terminal.")]


def show(data: Any, sheet: Callable[[Any], Sheet], *, as_json: bool, wide: bool = False) -> None:
    """A read command's answer: the leader's JSON (`--json`), or its sheet (the columns that fit; all with --wide)."""
    if as_json:
        print_json(data)
    else:
        print_sheet(console, sheet(data), wide=wide)


def print_json(data: Any) -> None:
    """A typed answer (or a list of them) as indented JSON on stdout."""
    if isinstance(data, BaseModel):
        data = data.model_dump(mode="json")
    elif isinstance(data, list):
        data = [d.model_dump(mode="json") if isinstance(d, BaseModel) else d for d in data]
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")


def fail(message: str, code: int) -> NoReturn:
    """One line on stderr, then the exit code."""
    err_console.print(f"error: {message}", markup=False, highlight=False, soft_wrap=True)  # one line, never wrapped
    raise typer.Exit(code)


def leader_url(url: str) -> str:
    """The leader's base URL from what a user gave: `http(s)://host:port`, with any `/api/v1` after it dropped (the
    API's own path, which users paste from its docs); anything else is a usage error naming --url."""
    try:
        parsed = httpx.URL(url)
    except httpx.InvalidURL as exc:
        fail(f"--url {url!r} is not a URL ({exc}); give the leader's, e.g. {DEFAULT_URL}", EXIT_USAGE)
    if parsed.scheme not in ("http", "https") or not parsed.host:
        fail(f"--url {url!r} needs http:// or https:// and a host, e.g. {DEFAULT_URL}", EXIT_USAGE)
    path = parsed.path.rstrip("/").removesuffix("/api/v1")
    return str(parsed.copy_with(path=path or "/", query=None, fragment=None)).rstrip("/")


def client_for(url: str, token: str) -> BenchfleetClient:
    """A client of the leader at `url` (a usage error without a token, or for a URL that is not a leader's)."""
    base = leader_url(url)
    if not token:
        fail("no API token: pass --token or set BENCHFLEET_TOKEN", EXIT_USAGE)
    return BenchfleetClient(base, token)


def call(fn, *args, **kwargs):
    """Run a client call, turning API and connection errors into one line and an exit code."""
    try:
        return fn(*args, **kwargs)
    except ApiError as exc:
        fail(str(exc), EXIT_API)
    except httpx.TransportError as exc:
        fail(f"cannot reach the leader: {exc}", EXIT_UNREACHABLE)
