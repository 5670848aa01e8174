"""Request-data routes: upload (multipart; npz, JSONL, a zip of images or a trace), list, metadata, download, delete."""

from __future__ import annotations

import hashlib
import uuid
from typing import BinaryIO, cast

from fastapi import APIRouter, Request, Response
from fastapi.responses import StreamingResponse

from common.base import NAME_PATTERN
from common.errors import Forbidden, InvalidSpec, PayloadTooLarge
from common.formats.datasets import DATA_FORMATS, BadData, DataFormat, DataSetMeta, inspect_data
from common.formats.traces import trace_facts
from leader.api import heavy
from leader.api.deps import Db, Reader, SettingsDep, Submitter, Viewer, team_of_upload
from leader.api.uploads import CHUNK_BYTES, multipart_body, spooled_chunks, text_field, upload_file, upload_form
from leader.clock import utcnow
from leader.store import datasets as data_store

router = APIRouter(prefix="/data", tags=["data"])

_UPLOAD_BODY = multipart_body(
    ["name", "format"],
    {
        "name": {"type": "string", "pattern": NAME_PATTERN},
        "format": {"type": "string", "enum": list(DATA_FORMATS)},
        "team": {"type": "string", "pattern": NAME_PATTERN, "description": "an admin's upload: the team it is for"},
    },
)


def _too_large(limit: int) -> PayloadTooLarge:
    return PayloadTooLarge(f"data file exceeds the limit of {limit} bytes", field="file")


def _check(spool: BinaryIO, data_format: str, limit: int) -> tuple[int, str, int, list[str]]:
    """Size, sha256, samples and fields of the spooled file (a worker thread: hashing and parsing are CPU work)."""
    spool.seek(0)
    digest, size = hashlib.sha256(), 0
    while chunk := spool.read(CHUNK_BYTES):
        size += len(chunk)
        if size > limit:
            raise _too_large(limit)
        digest.update(chunk)
    try:
        samples, fields = inspect_data(spool, data_format)
    except BadData as exc:
        raise InvalidSpec(f"not a valid {data_format} data set: {exc}", field="file") from None
    return size, digest.hexdigest(), samples, fields


@router.post("", status_code=201, response_model=DataSetMeta, openapi_extra=_UPLOAD_BODY)
async def upload_data(request: Request, db: Db, settings: SettingsDep, principal: Submitter) -> DataSetMeta:
    """Store a request-data set after its size and format checks; jobs name it by the returned id."""
    async with upload_form(request, what="a data set", limit=settings.max_upload_bytes, user=principal.user) as form:
        name = text_field(form.get("name"), "name", NAME_PATTERN)
        data_format = form.get("format")
        if data_format not in DATA_FORMATS:
            raise InvalidSpec(f"must be one of {', '.join(DATA_FORMATS)}", field="format")
        upload = upload_file(form, "the data file")
        if upload.size is not None and upload.size > settings.max_upload_bytes:
            raise _too_large(settings.max_upload_bytes)
        # Same path as model uploads: spooled under the byte limit, checked, then streamed into GridFS.
        size, sha256, samples, fields = await heavy.run(
            "upload", _check, upload.file, str(data_format), settings.max_upload_bytes
        )
        span_s, max_input = None, None
        if data_format == "trace":  # what a job naming this trace is checked against at submission
            span_s, max_input = await heavy.run("upload", trace_facts, upload.file)
        meta = DataSetMeta(
            id=uuid.uuid4().hex,
            name=name,
            format=cast(DataFormat, data_format),  # checked above
            samples=samples,
            fields=fields,
            sha256=sha256,
            size_bytes=size,
            created_at=utcnow(),
            owner=principal.user,
            span_s=span_s,
            max_input=max_input,
            team=team_of_upload(principal, form.get("team")),
        )
        return await data_store.insert_stream(db, meta=meta, chunks=spooled_chunks(upload.file))


@router.get("", response_model=list[DataSetMeta])
async def list_data(db: Db, viewer: Viewer) -> list[DataSetMeta]:
    """Every stored data set of the caller's team (every team's for an admin)."""
    return await data_store.list_all(db, team=viewer.scope)


# Followers fetch the data of their tasks, so metadata and bytes also accept the follower token.
@router.get("/{data_id}", response_model=DataSetMeta)
async def get_data(data_id: str, db: Db, reader: Reader) -> DataSetMeta:
    """One data set's metadata."""
    return await data_store.get(db, data_id=data_id, team=reader.scope)


@router.get("/{data_id}/file", response_class=StreamingResponse)
async def download_data(data_id: str, db: Db, reader: Reader) -> StreamingResponse:
    """The data set's bytes, streamed from GridFS, with their sha256 in X-Benchfleet-Sha256."""
    meta, chunks = await data_store.open_file(db, data_id=data_id, team=reader.scope)
    headers = {"X-Benchfleet-Sha256": meta.sha256, "Content-Length": str(meta.size_bytes)}
    return StreamingResponse(chunks, media_type="application/octet-stream", headers=headers)


@router.delete("/{data_id}", status_code=204, response_class=Response)
async def delete_data(data_id: str, db: Db, principal: Submitter) -> Response:
    """Delete a data set; only its owner or an admin may (403)."""
    meta = await data_store.get(db, data_id=data_id, team=principal.scope)
    if not principal.may_manage(meta.owner):
        raise Forbidden(f"data set {meta.id} belongs to {meta.owner}; only they or an admin may delete it", field="owner")
    await data_store.delete(db, data_id=data_id)
    return Response(status_code=204)
