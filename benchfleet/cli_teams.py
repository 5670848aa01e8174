"""Teams sharing the fleet: `teams ls` (weights, fair shares, use now), `teams set TEAM --weight W --allow NET` (admins), and
`usage` (follower- and GPU-hours with their cost over a period, by team, user, follower class or follower)."""

from __future__ import annotations

from typing import Annotated

import typer

from benchfleet.cli_common import DEFAULT_URL, EXIT_USAGE, JsonOpt, TokenOpt, UrlOpt, call, client_for, console, fail, show
from benchfleet.render import simple_sheet
from benchfleet.tables import Col, Sheet
from common import egress
from common.wire.teams import TeamSettings, TeamView, UsageReport

teams_app = typer.Typer(no_args_is_help=True, help="Teams sharing the fleet: their weights and use (ls), set a weight.")


def _share(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _team_row(t: TeamView) -> list[str]:
    contending = "yes" if t.active else "no"
    return [t.team, f"{t.weight:g}", contending, _share(t.fair_share), _share(t.use_share), f"{t.used_s / 3600:.2f}"]


def teams_sheet(rows: list[TeamView]) -> Sheet:
    """One row per team: its weight, whether it contends for the fleet now, its fair share and its share of use."""
    return simple_sheet(
        (
            Col("team", right=False),
            Col("weight"),
            Col("contending", right=False),
            Col("fair share"),
            Col("use share"),
            Col("follower h (window)"),
        ),
        [_team_row(t) for t in rows],
        title="teams",
    )


def usage_sheet(report: UsageReport) -> Sheet:
    """One row per key, then the total: runs, jobs, follower-hours, GPU-hours and the cost."""

    def cost(value: float | None) -> str:
        return "-" if value is None else f"{value:,.2f} {report.currency}"

    rows = [*report.rows, report.total]
    return simple_sheet(
        (
            Col(report.by.replace("_", " "), right=False),
            Col("runs"),
            Col("jobs"),
            Col("follower h"),
            Col("GPU h"),
            Col("cost"),
        ),
        [[r.key, str(r.attempts), str(r.jobs), f"{r.follower_hours:.3f}", f"{r.gpu_hours:.3f}", cost(r.cost)] for r in rows],
        title=f"usage {report.since:%Y-%m-%d %H:%M} to {report.until:%Y-%m-%d %H:%M} UTC",
    )


@teams_app.command("ls")
def teams_ls(url: UrlOpt = DEFAULT_URL, token: TokenOpt = "", as_json: JsonOpt = False) -> None:
    """Every team (yours, unless you are an admin): weight, fair share and use of the fleet over the window."""
    with client_for(url, token) as client:
        rows = call(client.teams)
    show(rows, teams_sheet, as_json=as_json)


@teams_app.command("set")
def teams_set(
    team: str,
    weight: Annotated[float, typer.Option(help="Its share of a contended fleet against the others' weights.")] = 1.0,
    quota: Annotated[
        list[str] | None, typer.Option(help="CLASS=HOURS: follower-hours a day on that follower class (`*`: any other).")
    ] = None,
    allow: Annotated[
        list[str] | None,
        typer.Option(help="A loopback, private or other non-public network its targets may be (e.g. 10.0.0.0/8); repeat."),
    ] = None,
    url: UrlOpt = DEFAULT_URL,
    token: TokenOpt = "",
) -> None:
    """Set a team's weight, daily quotas and the non-public networks its targets may be (admins; what is not given goes
    back to the default)."""
    quotas: dict[str, float] = {}
    for item in quota or []:
        cls, _, hours = item.rpartition("=")
        try:
            if not cls:
                raise ValueError(item)
            quotas[cls] = float(hours)
        except ValueError:
            fail(f"--quota {item!r}: expected CLASS=HOURS", EXIT_USAGE)
    for item in allow or []:
        try:
            egress.network(item)
        except ValueError as exc:
            fail(f"--allow: {exc}", EXIT_USAGE)
    with client_for(url, token) as client:
        view = call(client.set_team, team, TeamSettings(weight=weight, quota_hours_per_day=quotas, egress_allow=allow or []))
    shown = ", ".join(f"{c} {h:g} h" for c, h in view.quota_hours_per_day.items()) or "none"
    allowed = ", ".join(view.egress_allow) or "none"
    console.print(
        f"team {view.team}: weight {view.weight:g}, daily quotas: {shown}, non-public targets allowed: {allowed}", markup=False
    )


def register(app: typer.Typer) -> None:
    """Add the team and accounting commands to the CLI."""
    app.add_typer(teams_app, name="teams")

    @app.command()
    def usage(
        by: Annotated[str, typer.Option(help="team, user, follower_class or follower")] = "team",
        since: Annotated[str | None, typer.Option(help="ISO date or time (default: 30 days before --until)")] = None,
        until: Annotated[str | None, typer.Option(help="ISO date or time (default: now)")] = None,
        url: UrlOpt = DEFAULT_URL,
        token: TokenOpt = "",
        as_json: JsonOpt = False,
    ) -> None:
        """Follower-hours, GPU-hours and their cost at the leader's prices over a period."""
        with client_for(url, token) as client:
            report = call(client.usage, by=by, since=since, until=until)
        show(report, usage_sheet, as_json=as_json)
