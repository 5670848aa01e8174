"""Imports: another tool's result files (multipart, several `file` parts from one run) become a job of kind
`imported` in the importer's team; its raw files are kept with it."""

from __future__ import annotations

import re
import uuid
from typing import Any, cast, get_args

from fastapi import APIRouter, Request, Response
from starlette.datastructures import UploadFile

from common.base import NAME_PATTERN
from common.errors import InvalidSpec, PayloadTooLarge
from common.formats.imports import MAX_FILES, MAX_IMPORT_BYTES, read
from common.formats.imports.model import ImportRefused, Run
from common.wire.imports import TOOL_NAMES, ImportSummary, Tool
from leader.api import heavy
from leader.api.deps import Db, JobId, SettingsDep, Submitter, Viewer, team_of_upload
from leader.api.uploads import multipart_body, upload_form
from leader.clock import utcnow
from leader.jobs.imported import job_document, point_results
from leader.store import imports as imports_store
from leader.store import jobs as jobs_store

router = APIRouter(tags=["imports"])

_BODY = multipart_body(
    [],
    {
        "tool": {"type": "string", "enum": list(get_args(Tool)), "description": "default: recognised from the files"},
        "name": {"type": "string", "pattern": NAME_PATTERN, "description": "the job's name (default: the tool's)"},
        "model": {"type": "string", "pattern": NAME_PATTERN, "description": "the model (default: as the files name it)"},
        "team": {"type": "string", "pattern": NAME_PATTERN, "description": "an admin's import: the team it is for"},
    },
)
# A file name as kept with the job: the upload's base name, plain characters only.
_SAFE = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")


def _name(field: object, default: str, what: str) -> str:
    value = field if isinstance(field, str) and field else default
    if not re.fullmatch(NAME_PATTERN, value):
        raise InvalidSpec(f"must be letters, digits, . _ - (starting with a letter or digit), at most 64: {value!r}", field=what)
    return value


def _as_name(model: str | None) -> str:
    """The model as the files name it, made a benchfleet name (its last path part; other characters as -)."""
    base = re.sub(r"[^A-Za-z0-9._-]", "-", (model or "").rstrip("/").rsplit("/", 1)[-1]).strip("-._")[:64]
    return base or "unknown-model"


def _clean(filename: str | None, k: int) -> str:
    base = (filename or f"file{k}").replace("\\", "/").rsplit("/", 1)[-1]
    cleaned = "".join(c if c in _SAFE else "_" for c in base)[:128].lstrip(".")
    return cleaned or f"file{k}"


def _read(files: dict[str, bytes], tool: Tool | None) -> Run:
    try:
        return read(files, tool)
    except ImportRefused as exc:
        raise InvalidSpec(str(exc), field="file") from None


@router.post("/imports", status_code=201, response_model=ImportSummary, openapi_extra=_BODY)
async def import_run(request: Request, db: Db, settings: SettingsDep, principal: Submitter) -> ImportSummary:
    """Import another tool's result files as a job of kind `imported` (one point per load level; no validity verdict
    of benchfleet's). 422 naming the tool's format and the field or line that failed; nothing is stored then."""
    limit = min(settings.max_upload_bytes, MAX_IMPORT_BYTES)
    async with upload_form(request, what="result files", limit=limit, user=principal.user, files=MAX_FILES) as form:
        tool_field = form.get("tool")
        if tool_field and tool_field not in TOOL_NAMES:
            raise InvalidSpec(f"must be one of {', '.join(TOOL_NAMES)}", field="tool")
        uploads = [u for u in form.getlist("file") if isinstance(u, UploadFile)]
        if not uploads:
            raise InvalidSpec("field required (the tool's result files)", field="file")
        files: dict[str, bytes] = {}
        for k, upload in enumerate(uploads):
            data = await upload.read(limit + 1)
            if len(data) + sum(map(len, files.values())) > limit:
                raise PayloadTooLarge(f"the files exceed the limit of {limit} bytes in all", field="file")
            name = _clean(upload.filename, k)
            if name in files:
                raise InvalidSpec(f"two files named {name}", field="file")
            files[name] = data
        run = await heavy.run("upload", _read, files, cast(Tool | None, tool_field or None))
        name = _name(form.get("name"), f"{run.tool}-import", "name")
        model = _name(form.get("model"), _as_name(run.model), "model")
        team = team_of_upload(principal, form.get("team"))
    job_id, now = uuid.uuid4().hex, utcnow()
    doc = job_document(run, job_id=job_id, name=name, model=model, owner=principal.user, team=team, files=list(files), now=now)
    await imports_store.insert_import(db, doc=doc, results=point_results(run, now), files=files)
    return ImportSummary(
        job_id=job_id, tool=run.tool, version=run.version, points=len(run.levels), files=list(files), command=run.command
    )


@router.get("/jobs/{job_id}/imported/{name}", response_class=Response)
async def imported_file(job_id: JobId, name: str, db: Db, viewer: Viewer) -> Response:
    """A raw file kept with an imported job, as it was uploaded."""
    await jobs_store.get_job(db, job_id=job_id, team=viewer.scope)
    data = await imports_store.read_file(db, job_id=job_id, name=name)
    headers: dict[str, Any] = {"Content-Disposition": f'attachment; filename="{name}"'}
    return Response(data, media_type="application/octet-stream", headers=headers)
