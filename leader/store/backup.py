"""Backup and restore of the whole PerfDB: every collection (GridFS buckets, models and raw records included), as one
tar archive. All but the leaderboard rows' stamp (leader.store.leaderboard.STAMPS, which cached pages a running leader
may serve): a restore drops it with the rest, so no page read from the rows replaced is served again.

The archive holds `manifest.json` first (format, schema version, benchfleet release, and per collection its document
count, the SHA-256 of its documents' BSON in `_id` order, and its indexes), then one `<collection>.bson` per collection
(documents back to back, as mongodump writes them). Documents travel as raw BSON, never decoded and re-encoded, so a
restored database holds the same bytes: a backup of it has the same checksums.

A restore checks the whole archive against its manifest before it writes anything, refuses an archive of a schema
newer than this release knows, and writes only into an empty database unless told to replace it (which drops its
collections first). Nothing in an archive is executed or unpickled; member names are checked as collection names and
never become paths. Take a backup with the leader stopped (or idle): each collection is read once, in turn, not at one
instant. A leader started on a restored database migrates it if it is of an older schema.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import tarfile
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from bson import decode_file_iter
from bson.codec_options import CodecOptions
from bson.raw_bson import RawBSONDocument
from pymongo.asynchronous.database import AsyncDatabase

from common import __version__
from leader.clock import utcnow
from leader.store import leaderboard, migrations

FORMAT = 1
MANIFEST = "manifest.json"
MANIFEST_LIMIT = 4 << 20  # bytes: a manifest is a few kilobytes
BATCH = 500  # documents per insert
COLLECTION_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,119}$")
RAW = CodecOptions(document_class=RawBSONDocument)


class BadArchive(ValueError):
    """An archive this release cannot restore: not a benchfleet backup, damaged, or of a newer schema."""


@dataclass(frozen=True)
class Summary:
    """What a backup wrote or a restore read: the schema version and, per collection, documents and checksum."""

    schema_version: int
    collections: dict[str, dict[str, Any]]

    @property
    def documents(self) -> int:
        return sum(int(c["documents"]) for c in self.collections.values())


def _index_specs(indexes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A collection's indexes but `_id`'s, as (keys, name, unique) to create again."""
    out = []
    for ix in indexes:
        if ix.get("name") == "_id_":
            continue
        out.append({"keys": [[k, v] for k, v in dict(ix["key"]).items()], "name": ix["name"], "unique": bool(ix.get("unique"))})
    return out


async def backup(db: AsyncDatabase, path: Path) -> Summary:
    """Write the whole database to `path` (a tar archive; written beside it, then renamed into place)."""
    raw = db.with_options(codec_options=RAW)
    collections: dict[str, dict[str, Any]] = {}
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=path.parent, prefix=".backup-") as work:
        for name in sorted(await db.list_collection_names()):
            if name == leaderboard.STAMPS:  # which leaderboard pages a running leader may serve from its cache
                continue
            if not COLLECTION_NAME.match(name):
                raise BadArchive(f"collection {name!r} has a name this archive cannot carry")
            digest, count = hashlib.sha256(), 0
            with open(Path(work) / f"{name}.bson", "wb") as out:
                async for doc in raw[name].find().sort("_id", 1):
                    data = doc.raw
                    out.write(data)
                    digest.update(data)
                    count += 1
            indexes = _index_specs([dict(ix) async for ix in await db[name].list_indexes()])
            collections[name] = {"documents": count, "sha256": digest.hexdigest(), "indexes": indexes}
        schema_version = await migrations.schema_version(db)
        manifest = {
            "format": FORMAT,
            "schema_version": schema_version,
            "benchfleet": __version__,
            "created_at": utcnow().isoformat(),
            "collections": collections,
        }
        partial = Path(work) / "archive.tar"
        with tarfile.open(partial, "w") as tar:
            text = json.dumps(manifest, indent=1, sort_keys=True).encode()
            info = tarfile.TarInfo(MANIFEST)
            info.size = len(text)
            tar.addfile(info, io.BytesIO(text))
            for name in collections:
                tar.add(Path(work) / f"{name}.bson", arcname=f"{name}.bson")
        partial.replace(path)
    return Summary(schema_version=schema_version, collections=collections)


def _manifest(tar: tarfile.TarFile) -> dict[str, Any]:
    first = tar.next()
    if first is None or first.name != MANIFEST or not first.isfile() or first.size > MANIFEST_LIMIT:
        raise BadArchive(f"not a benchfleet backup: it does not begin with {MANIFEST}")
    handle = tar.extractfile(first)
    assert handle is not None
    try:
        manifest = json.loads(handle.read())
    except ValueError as exc:
        raise BadArchive(f"{MANIFEST} is not JSON: {exc}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT or not isinstance(manifest.get("collections"), dict):
        raise BadArchive(f"{MANIFEST} is not of backup format {FORMAT}")
    version = manifest.get("schema_version")
    if not isinstance(version, int) or version > migrations.SCHEMA_VERSION:
        raise BadArchive(
            f"the backup is of schema version {version!r}; this release (benchfleet {__version__}) knows up to "
            f"{migrations.SCHEMA_VERSION}: restore it with the release that wrote it ({manifest.get('benchfleet')!r})"
        )
    for name, entry in manifest["collections"].items():
        if not COLLECTION_NAME.match(str(name)) or not isinstance(entry, dict):
            raise BadArchive(f"{MANIFEST} names a collection {str(name)[:60]!r} that cannot be one")
    return manifest


def _members(path: Path) -> Iterator[tuple[str, IO[bytes]]]:
    """(collection, its documents' stream) for each collection member after the manifest."""
    with tarfile.open(path, "r:*") as tar:
        _manifest(tar)
        while (member := tar.next()) is not None:  # (iterating the archive would start again at the manifest)
            name = member.name.removesuffix(".bson")
            if not member.isfile() or not member.name.endswith(".bson") or not COLLECTION_NAME.match(name):
                raise BadArchive(f"unexpected member {member.name[:80]!r} in the archive")
            handle = tar.extractfile(member)
            assert handle is not None
            yield name, handle


def _documents(handle: IO[bytes]) -> Iterator[RawBSONDocument]:
    try:
        yield from decode_file_iter(handle, codec_options=RAW)
    except Exception as exc:  # noqa: BLE001 - bson raises several kinds for damaged bytes: one answer for all
        raise BadArchive(f"damaged documents: {type(exc).__name__}: {exc}") from None


def verify(path: Path) -> dict[str, Any]:
    """The archive's manifest, once every collection's documents match its count and checksum; BadArchive otherwise."""
    try:
        with tarfile.open(path, "r:*") as tar:
            manifest = _manifest(tar)
        seen: set[str] = set()
        for name, handle in _members(path):
            expected = manifest["collections"].get(name)
            if expected is None:
                raise BadArchive(f"collection {name} is in the archive but not in its manifest")
            digest, count = hashlib.sha256(), 0
            for doc in _documents(handle):
                digest.update(doc.raw)
                count += 1
            if count != expected.get("documents") or digest.hexdigest() != expected.get("sha256"):
                raise BadArchive(f"collection {name}: {count} documents that do not match the manifest's checksum")
            seen.add(name)
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise BadArchive(f"not a readable archive: {exc}") from None
    if missing := sorted(set(manifest["collections"]) - seen):
        raise BadArchive(f"the archive lacks collections its manifest names: {', '.join(missing)}")
    return manifest


async def restore(db: AsyncDatabase, path: Path, *, replace: bool = False) -> Summary:
    """Restore an archive into `db`: checked whole first; into an empty database, or (`replace`) after dropping
    every collection it has."""
    manifest = verify(path)
    existing = await db.list_collection_names()
    if existing and not replace:
        held = [name for name in existing if await db[name].estimated_document_count()]
        if held:
            raise BadArchive(
                f"database {db.name} is not empty ({len(held)} collections hold documents): restore into an empty one, "
                "or replace it"
            )
    for name in existing:
        await db.drop_collection(name)
    raw = db.with_options(codec_options=RAW)
    for name, handle in _members(path):
        await db.create_collection(name)  # an empty one too: the restored database lists what the backed-up one did
        batch: list[RawBSONDocument] = []
        for doc in _documents(handle):
            batch.append(doc)
            if len(batch) >= BATCH:
                await raw[name].insert_many(batch, ordered=True)
                batch = []
        if batch:
            await raw[name].insert_many(batch, ordered=True)
        for ix in manifest["collections"][name].get("indexes") or []:
            await db[name].create_index([(k, v) for k, v in ix["keys"]], name=ix["name"], unique=ix["unique"])
    return Summary(schema_version=int(manifest["schema_version"]), collections=manifest["collections"])
