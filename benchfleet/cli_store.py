"""PerfDB's operator commands, run beside the database (not through the leader): backup and restore of the whole
database (leader/store/backup.py). They read the leader's own database settings (BENCHFLEET_LEADER_MONGO_URI or
BENCHFLEET_MONGO_URI, BENCHFLEET_LEADER_DB_NAME); the URI, which may hold a password, is never printed."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated, Any

import typer

from benchfleet.cli_common import EXIT_USAGE, console, err_console

DEFAULT_MONGO_URI = "mongodb://127.0.0.1:27017/?directConnection=true&retryWrites=false"
MongoOpt = Annotated[
    str,
    typer.Option(
        "--mongo-uri",
        envvar=["BENCHFLEET_LEADER_MONGO_URI", "BENCHFLEET_MONGO_URI"],
        help="PerfDB's URI (from the leader's variables)",
        show_default=False,
    ),
]
DbOpt = Annotated[str, typer.Option("--db", envvar="BENCHFLEET_LEADER_DB_NAME", help="PerfDB's database name")]


def _run(mongo_uri: str, db_name: str, work: Any) -> Any:
    """Run `work(database)` on a client of its own, journaled writes, closed after."""
    from pymongo import AsyncMongoClient

    async def run() -> Any:
        client: AsyncMongoClient = AsyncMongoClient(mongo_uri, journal=True, serverSelectionTimeoutMS=10_000)
        try:
            return await work(client[db_name])
        finally:
            await client.close()

    return asyncio.run(run())


def register(app: typer.Typer) -> None:
    """Add backup and restore to the CLI."""

    @app.command()
    def backup(
        archive: Annotated[Path, typer.Argument(help="the archive to write (a tar file)")],
        mongo_uri: MongoOpt = DEFAULT_MONGO_URI,
        db: DbOpt = "benchfleet",
    ) -> None:
        """Back up the whole PerfDB (jobs, results, raw records, models and data sets in GridFS, users, audit) into one
        archive with a manifest of per-collection checksums. Take it with the leader stopped or idle."""
        from leader.store import backup as store

        summary = _run(mongo_uri, db, lambda database: store.backup(database, archive))
        console.print(
            f"backed up {db}: {summary.documents} documents in {len(summary.collections)} collections "
            f"(schema {summary.schema_version}) to {archive} ({archive.stat().st_size:,} bytes)"
        )

    @app.command()
    def restore(
        archive: Annotated[Path, typer.Argument(help="an archive `benchfleet backup` wrote")],
        replace: Annotated[bool, typer.Option("--replace", help="drop what the database holds first")] = False,
        mongo_uri: MongoOpt = DEFAULT_MONGO_URI,
        db: DbOpt = "benchfleet",
    ) -> None:
        """Restore a backup into an empty PerfDB (or, with --replace, in place of what it holds), after checking every
        collection against the archive's manifest. Start the leader after: it migrates an older schema."""
        from leader.store import backup as store

        try:
            summary = _run(mongo_uri, db, lambda database: store.restore(database, archive, replace=replace))
        except store.BadArchive as exc:
            err_console.print(f"benchfleet restore: {exc}")
            raise typer.Exit(EXIT_USAGE) from None
        console.print(
            f"restored {db}: {summary.documents} documents in {len(summary.collections)} collections "
            f"(schema {summary.schema_version}) from {archive}"
        )
