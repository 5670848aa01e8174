"""Fleet and access commands: followers (list, drain, resume, fleet checks), user tokens (create, ls, revoke) and
target secrets (set, ls, rm)."""

from __future__ import annotations

import sys
import time
from typing import Annotated

import typer

from benchfleet.cli_common import (
    DEFAULT_URL,
    EXIT_REGRESSION,
    JsonOpt,
    TokenOpt,
    UrlOpt,
    WideOpt,
    call,
    client_for,
    console,
    err_console,
    print_json,
    show,
)
from benchfleet.render import simple_sheet
from benchfleet.tables import Col, Sheet
from common.wire.analysis import FleetCheckView
from common.wire.auth import TokenView
from common.wire.followers import FollowerView

tokens_app = typer.Typer(no_args_is_help=True, help="User tokens (admins): create, list, revoke.")
secrets_app = typer.Typer(no_args_is_help=True, help="Target secrets of your team: set (value read from stdin), ls, rm.")


def followers_sheet(rows: list[FollowerView]) -> Sheet:
    """One row per follower: its state, machine, backends, running job, whether a fleet check found it anomalous
    (the evidence as a numbered note under the table), its clock's offset to the leader's, and its benchfleet release
    (one other than the leader's with a note saying so)."""
    sheet = simple_sheet(
        (
            Col("id", right=False),
            Col("state", right=False),
            Col("host", right=False, rank=3),
            Col("cpus", rank=2),
            Col("memory MiB", rank=4),
            Col("GPUs", right=False, rank=1),
            Col("backends", right=False, rank=2),
            Col("last seen", right=False, rank=1),
            Col("running", right=False),
            Col("anomalous", right=False),
            Col("clock ms", right=False, rank=4),
            Col("release", right=False, rank=3),
        ),
        [],
        title="followers",
    )
    for f in rows:
        anomalous = "-" if f.anomaly is None else f"YES {sheet.note(f'{f.info.follower_id}: {f.anomaly.evidence}')}"
        sheet.rows.append(
            [
                f.info.follower_id,
                f.state,
                f.info.host,
                str(f.info.cpu_count),
                str(f.info.memory_mb),
                ", ".join(g.name for g in f.info.gpus) or "none",
                ",".join(f.info.backends),
                f.last_seen.strftime("%H:%M:%S"),
                f.running_job or "-",
                anomalous,
                f"{f.clock.offset_ms:+.3f} ±{f.clock.uncertainty_ms:.3f}" if f.clock else "-",
                _release(sheet, f),
            ]
        )
    return sheet


def _release(sheet: Sheet, f: FollowerView) -> str:
    """The follower's release, with a numbered note where it is not the leader's."""
    if f.release_note is None:
        return f.info.version
    return f"{f.info.version} {sheet.note(f'{f.info.follower_id}: {f.release_note}')}"


def fleet_check_sheet(check: FleetCheckView) -> Sheet:
    """A fleet check: each follower's figure against its class (median, robust z) and whether it is an outlier."""
    sheet = simple_sheet(
        (
            Col("follower", right=False),
            Col("point", right=False, rank=2),
            Col("p50 ms"),
            Col("class median", rank=1),
            Col("change"),
            Col("z"),
            Col("outlier", right=False),
        ),
        [],
        title=f"fleet check {check.id} ({check.model_ref}, {check.state})",
    )
    for p in check.across.points if check.across else []:
        sheet.rows.append(
            [
                p.follower_id,
                p.key,
                f"{p.value_ms:.3f}",
                f"{p.median_ms:.3f}",
                f"{p.deviation:+.0%}",
                f"{p.z:.1f}",
                "YES" if p.outlier else "-",
            ]
        )
    for follower_id, why in sorted(check.no_figure.items()):
        sheet.rows.append([follower_id, "-", "none", "-", "-", "-", "YES"])
        sheet.note(f"{follower_id}: no figure, run with the others and again alone: {why}")
    for h in check.history:
        if h.outlier:
            sheet.note(
                f"{h.follower_id}: {h.value_ms:.3g} ms against its own median {h.median_ms:.3g} ms over "
                f"{len(h.history)} earlier checks (z {h.z:.1f})"
            )
    for follower_id in sorted(check.recheck):
        if check.state != "done":
            verdict = "running"
        elif follower_id in check.no_figure:
            verdict = "still no figure"
        else:
            verdict = "still an outlier" if follower_id in check.outliers else "not again: its first round was noise"
        sheet.note(f"{follower_id}: a suspect in the first round, re-run alone (its figure above): {verdict}")
    sheet.footer = f"outliers: {', '.join(check.outliers) or 'none'}" if check.state == "done" else "still running"
    return sheet


def tokens_sheet(rows: list[TokenView]) -> Sheet:
    """One row per token: whose, which role and team, and whether it still opens anything (never the secret)."""
    return simple_sheet(
        (
            Col("id", right=False),
            Col("user", right=False),
            Col("role", right=False),
            Col("team", right=False),
            Col("label", right=False, rank=3),
            Col("follower", right=False, rank=4),
            Col("created", right=False, rank=2),
            Col("expires", right=False, rank=1),
            Col("revoked", right=False),
        ),
        (
            [
                t.id,
                t.user,
                t.role,
                t.team,
                t.label or "-",
                t.follower_id or "-",
                t.created_at.strftime("%Y-%m-%d %H:%M"),
                t.expires_at.strftime("%Y-%m-%d %H:%M") if t.expires_at else "never",
                "yes" if t.revoked else "no",
            ]
            for t in rows
        ),
        title="tokens",
    )


@tokens_app.command("create")
def tokens_create(
    user: str,
    role: Annotated[str, typer.Option(help="viewer, submitter or admin.")] = "viewer",
    team: Annotated[str | None, typer.Option(help="The team whose jobs, models and data it sees (default: default).")] = None,
    label: str = "",
    expires_in_s: Annotated[int | None, typer.Option(help="Seconds it lives (default: the leader's token_ttl_s).")] = None,
    url: UrlOpt = DEFAULT_URL,
    token: TokenOpt = "",
    as_json: JsonOpt = False,
) -> None:
    """Issue a user token; the secret is printed once, on stdout (the rest goes to stderr)."""
    with client_for(url, token) as client:
        issued = call(client.create_token, user, role, team=team, label=label, expires_in_s=expires_in_s)
    if as_json:
        print_json(issued)
        return
    expires = issued.expires_at.isoformat() if issued.expires_at else "never"
    err_console.print(
        f"token {issued.id} for {issued.user} ({issued.role}, team {issued.team}), expires {expires}:",
        markup=False,
        soft_wrap=True,
    )
    console.print(issued.token, markup=False, highlight=False)


@tokens_app.command("ls")
def tokens_ls(url: UrlOpt = DEFAULT_URL, token: TokenOpt = "", as_json: JsonOpt = False) -> None:
    """Every token (never the secrets)."""
    with client_for(url, token) as client:
        rows = call(client.tokens)
    show(rows, tokens_sheet, as_json=as_json)


@tokens_app.command("revoke")
def tokens_revoke(token_id: str, url: UrlOpt = DEFAULT_URL, token: TokenOpt = "") -> None:
    """Revoke a token at once."""
    with client_for(url, token) as client:
        view = call(client.revoke_token, token_id)
    console.print(f"token {view.id} of {view.user} revoked", markup=False)


@secrets_app.command("set")
def secrets_set(
    name: str,
    header: Annotated[str, typer.Option(help="The header the target wants it in.")] = "Authorization",
    ca_bundle: Annotated[bool, typer.Option("--ca-bundle", help="A PEM CA bundle, not a header.")] = False,
    url: UrlOpt = DEFAULT_URL,
    token: TokenOpt = "",
) -> None:
    """Store a target secret; its value is read from stdin (never an argument: argv shows in `ps` and shell history)."""
    value = sys.stdin.read()
    value = value if ca_bundle else value.strip("\r\n")
    with client_for(url, token) as client:
        view = call(client.put_secret, name, value, kind="ca_bundle" if ca_bundle else "header", header=header)
    where = f", header {view.header}" if view.header else ""
    console.print(f"secret {view.name} of team {view.team} stored ({view.kind}{where})", markup=False)


@secrets_app.command("ls")
def secrets_ls(url: UrlOpt = DEFAULT_URL, token: TokenOpt = "", as_json: JsonOpt = False) -> None:
    """Your team's target secrets (never their values)."""
    with client_for(url, token) as client:
        rows = call(client.secrets)
    show(
        rows,
        lambda rs: simple_sheet(
            (
                Col("name", right=False),
                Col("team", right=False),
                Col("kind", right=False),
                Col("header", right=False),
                Col("created", right=False),
                Col("by", right=False),
            ),
            ([s.name, s.team, s.kind, s.header or "-", s.created_at.strftime("%Y-%m-%d %H:%M"), s.created_by] for s in rs),
            title="secrets",
        ),
        as_json=as_json,
    )


@secrets_app.command("rm")
def secrets_rm(name: str, url: UrlOpt = DEFAULT_URL, token: TokenOpt = "") -> None:
    """Remove a target secret (jobs naming it fail to open it from then on)."""
    with client_for(url, token) as client:
        view = call(client.delete_secret, name)
    console.print(f"secret {view.name} of team {view.team} removed", markup=False)


def register(app: typer.Typer) -> None:
    """Add the fleet, token and secret commands to the CLI."""
    app.add_typer(tokens_app, name="tokens")
    app.add_typer(secrets_app, name="secrets")

    @app.command()
    def followers(url: UrlOpt = DEFAULT_URL, token: TokenOpt = "", as_json: JsonOpt = False, wide: WideOpt = False) -> None:
        """List followers and their state."""
        with client_for(url, token) as client:
            rows = call(client.followers)
        show(rows, followers_sheet, as_json=as_json, wide=wide)

    @app.command("fleet-check")
    def fleet_check(
        model: Annotated[str, typer.Argument(help="an ONNX model, name:version")],
        hardware: Annotated[str | None, typer.Option(help="followers whose CPU or GPU name holds this")] = None,
        rate: Annotated[float, typer.Option(help="constant requests/s")] = 50.0,
        duration: Annotated[float, typer.Option(help="seconds each follower measures")] = 10.0,
        url: UrlOpt = DEFAULT_URL,
        token: TokenOpt = "",
        as_json: JsonOpt = False,
        wide: WideOpt = False,
    ) -> None:
        """Run a fleet check (admins): the same benchmark pinned to every follower of a class; wait for it and show
        who stands out (robust z-score over median and MAD). Exits 5 when a follower is anomalous."""
        with client_for(url, token) as client:
            check = call(client.start_fleet_check, model, hardware=hardware, rate=rate, duration_s=duration)
            console.print(f"fleet check {check.id}: {len(check.jobs)} followers", markup=False)
            while check.state != "done":
                time.sleep(1.0)
                check = call(client.fleet_check, check.id)
        show(check, fleet_check_sheet, as_json=as_json, wide=wide)
        if check.outliers:
            raise typer.Exit(EXIT_REGRESSION)

    @app.command()
    def drain(follower_id: str, url: UrlOpt = DEFAULT_URL, token: TokenOpt = "") -> None:
        """Drain a follower (admins): it finishes its running job and takes no new one; its held jobs are requeued."""
        with client_for(url, token) as client:
            view = call(client.follower_action, follower_id, "drain")
        console.print(f"follower {view.info.follower_id} {view.state}", markup=False)

    @app.command()
    def approve(follower_id: str, url: UrlOpt = DEFAULT_URL, token: TokenOpt = "") -> None:
        """Approve a pending follower (admins): one that joined with the join token takes jobs, and reads their
        models, data sets and secrets, only once approved (unless the leader trusts its join token)."""
        with client_for(url, token) as client:
            view = call(client.follower_action, follower_id, "approve")
        console.print(f"follower {view.info.follower_id} {view.state}", markup=False)

    @app.command()
    def resume(follower_id: str, url: UrlOpt = DEFAULT_URL, token: TokenOpt = "") -> None:
        """End a follower's drain: it takes jobs again."""
        with client_for(url, token) as client:
            view = call(client.follower_action, follower_id, "resume")
        console.print(f"follower {view.info.follower_id} {view.state}", markup=False)
