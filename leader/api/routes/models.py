"""Model repository routes: upload (multipart), search, metadata, download, update (description, tags, an admin's
trust mark), delete."""

from __future__ import annotations

import hashlib
import logging
from typing import Annotated, BinaryIO, NamedTuple, NoReturn, cast, get_args

from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import StreamingResponse
from pydantic import TypeAdapter, ValidationError

from common.base import NAME_PATTERN, VERSION_PATTERN
from common.errors import Conflict, Forbidden, InvalidRequest, InvalidSpec, PayloadTooLarge, field_errors
from common.formats import hfbundle
from common.formats.onnx_signature import check_layout
from common.wire.models import CanonicalParams, LlmParams, ModelFormat, ModelMeta, ModelQuery, ModelUpdate, TensorSpec, tidy_tags
from leader.api import heavy
from leader.api.deps import Db, Reader, SettingsDep, Submitter, Viewer, team_of_upload
from leader.api.uploads import CHUNK_BYTES, multipart_body, spooled_chunks, text_field, upload_file, upload_form
from leader.canonical_meta import canonical_params
from leader.clock import utcnow
from leader.model_signature import model_signature
from leader.store import jobs as jobs_store
from leader.store import leaderboard as leaderboard_store
from leader.store import models as models_store

router = APIRouter(prefix="/models", tags=["models"])
log = logging.getLogger(__name__)

FORMATS: tuple[str, ...] = get_args(ModelFormat)
# Formats whose signature the leader parses from the bytes (the others declare it and are never opened here).
PARSED_FORMATS = ("onnx", "bundle")

_UPLOAD_BODY = multipart_body(
    ["name", "version"],
    {
        "name": {"type": "string", "pattern": NAME_PATTERN},
        "version": {"type": "string", "pattern": VERSION_PATTERN},
        "format": {"type": "string", "enum": list(FORMATS), "default": "onnx"},
        "team": {"type": "string", "pattern": NAME_PATTERN, "description": "an admin's upload: the team it is for"},
        "description": {"type": "string", "maxLength": 500},
        "tags": {"type": "string", "description": "comma-separated tags (lower case, digits, . _ -)"},
    },
)


@router.post("", status_code=201, response_model=ModelMeta, openapi_extra=_UPLOAD_BODY)
async def upload_model(request: Request, db: Db, settings: SettingsDep, principal: Submitter) -> ModelMeta:
    """Store a model file with its signature and checksum; the model is visible only once fully stored."""
    async with upload_form(request, what="a model", limit=settings.max_upload_bytes, user=principal.user) as form:
        name = text_field(form.get("name"), "name", NAME_PATTERN)
        version = text_field(form.get("version"), "version", VERSION_PATTERN)
        model_format = form.get("format") or "onnx"
        declared = form.get("signature")
        description, tags = _described(form.get("description"), form.get("tags"))
        if model_format not in FORMATS:
            raise InvalidSpec(f"must be one of {', '.join(FORMATS)}", field="format")
        upload = upload_file(form, "the model file")
        if upload.size is not None and upload.size > settings.max_upload_bytes:
            raise_too_large(settings.max_upload_bytes)
        if await models_store.exists(db, name=name, version=version):
            raise Conflict(f"model {name}:{version} already exists", field="version")
        # The multipart parser has spooled the file (1 MiB in memory, the rest on disk) while the byte limit was
        # enforced as it arrived; the format check reads it from there, before a single byte reaches GridFS.
        spool = upload.file
        # One upload's file at a time (a parsed model is held whole in memory); the others wait, spooled on disk.
        checked = await heavy.run(
            "upload",
            _check_spooled,
            spool,
            str(model_format),
            declared if isinstance(declared, str) else None,
            settings.max_upload_bytes,
        )
        meta = ModelMeta(
            name=name,
            version=version,
            format=cast(ModelFormat, model_format),  # one of FORMATS, checked above
            inputs=checked.inputs,
            outputs=checked.outputs,
            sha256=checked.sha256,
            size_bytes=checked.size,
            created_at=utcnow(),
            owner=principal.user,
            team=team_of_upload(principal, form.get("team")),
            canonical=checked.canonical,
            llm=checked.llm,
            description=description,
            tags=tags,
        )
        return await models_store.insert_model_stream(db, meta=meta, chunks=spooled_chunks(spool))


_DESCRIBED = TypeAdapter(ModelUpdate)


def _described(description: object, tags: object) -> tuple[str, list[str]]:
    """An upload's description and tags (comma-separated), checked as an update's are (422 naming the field)."""
    fields: dict[str, object] = {}
    if isinstance(description, str):
        fields["description"] = description
    if isinstance(tags, str):
        fields["tags"] = [t.strip() for t in tags.split(",") if t.strip()]
    try:
        update = _DESCRIBED.validate_python(fields)
    except ValidationError as exc:
        first = field_errors(exc)[0]
        raise InvalidSpec(first["message"], field=first["field"].split(".")[0]) from None
    return update.description or "", tidy_tags(update.tags or [])


class Checked(NamedTuple):
    """What the leader found in an upload."""

    size: int
    sha256: str
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]
    canonical: CanonicalParams | None
    llm: LlmParams | None


def _check_spooled(spool: BinaryIO, model_format: str, declared: str | None, limit: int) -> Checked:
    """Size, sha256, signature, (bundles) canonical params and (hf) the LLM's description of the spooled file (a
    worker thread: CPU work)."""
    spool.seek(0)
    digest = hashlib.sha256()
    size = 0
    while chunk := spool.read(CHUNK_BYTES):
        size += len(chunk)
        if size > limit:
            raise_too_large(limit)
        digest.update(chunk)
    data = b""
    if model_format in PARSED_FORMATS:
        # ONNX is a protobuf: its parser needs the whole message in memory (formats never opened here skip this), so
        # a plain ONNX file's layout is walked from the spool first: junk is refused without being read whole.
        if model_format == "onnx":
            check_layout(spool)
        spool.seek(0)
        data = spool.read()
    if model_format == "hf":
        # A language model has no tensor signature: its interface is text (OpenAI-compatible completions).
        spool.seek(0)
        try:
            llm = hfbundle.describe(spool, limit_bytes=hfbundle.UNPACK_FACTOR * limit)
        except hfbundle.HfBundleError as exc:
            raise InvalidSpec(str(exc), field="file") from None
        return Checked(size, digest.hexdigest(), [], [], None, llm)
    inputs, outputs = model_signature(model_format, data, declared)
    canonical = canonical_params(data) if model_format == "bundle" else None
    return Checked(size, digest.hexdigest(), inputs, outputs, canonical, None)


def raise_too_large(limit: int) -> NoReturn:
    """Refuse a model file larger than the upload limit."""
    raise PayloadTooLarge(f"model file exceeds the limit of {limit} bytes", field="file")


@router.get("", response_model=list[ModelMeta])
async def list_models(
    db: Db,
    viewer: Viewer,
    q: Annotated[str | None, Query(max_length=100, description="in the name or description, any case")] = None,
    tag: Annotated[list[str] | None, Query(description="every one of these tags")] = None,
    format: Annotated[ModelFormat | None, Query(description="the framework it was stored as")] = None,  # noqa: A002
    architecture: Annotated[str | None, Query(max_length=100)] = None,
    min_parameters: Annotated[int | None, Query(ge=0)] = None,
    max_parameters: Annotated[int | None, Query(ge=0)] = None,
) -> list[ModelMeta]:
    """The stored models of the caller's team (every team's for an admin) that meet every criterion given: text in
    the name or description, tags, format, architecture (a language model's, a canonical model's kind), parameter
    count."""
    try:
        query = ModelQuery(
            text=q,
            tags=tag or [],
            format=format,
            architecture=architecture,
            min_parameters=min_parameters,
            max_parameters=max_parameters,
        )
    except ValidationError as exc:
        first = field_errors(exc)[0]
        raise InvalidRequest(first["message"], field=_query_field(first["field"])) from None
    return await models_store.list_models(db, team=viewer.scope, query=query)


def _query_field(field: str) -> str:
    """A ModelQuery field as its query parameter is named."""
    return {"text": "q", "tags": "tag"}.get(field.split(".")[0], field)


# Followers fetch the models of their tasks, so metadata and bytes also accept the follower token.
@router.get("/{name}/{version}", response_model=ModelMeta)
async def get_model(name: str, version: str, db: Db, reader: Reader) -> ModelMeta:
    """One model's metadata; version `latest` names the newest."""
    return await models_store.get_model(db, name=name, version=version, team=reader.scope)


@router.get("/{name}/{version}/file", response_class=StreamingResponse)
async def download_model(name: str, version: str, db: Db, reader: Reader) -> StreamingResponse:
    """The model's bytes, streamed from GridFS, with their sha256 in X-Benchfleet-Sha256."""
    meta, chunks = await models_store.open_model_file(db, name=name, version=version, team=reader.scope)
    headers = {
        "X-Benchfleet-Sha256": meta.sha256,
        "Content-Length": str(meta.size_bytes),
        "Content-Disposition": f'attachment; filename="{meta.name}-{meta.version}.{meta.format}"',
    }
    return StreamingResponse(chunks, media_type="application/octet-stream", headers=headers)


@router.patch("/{name}/{version}", response_model=ModelMeta)
async def update_model(name: str, version: str, body: ModelUpdate, db: Db, principal: Submitter) -> ModelMeta:
    """Change a model's description and tags (its owner or an admin; 403 otherwise) and its trusted mark (admins only:
    followers that cannot sandbox a server then still run its TorchScript or SavedModel code, or convert it; sandboxing
    followers sandbox every model whatever the mark). Unfinished jobs take the mark too; leaderboard rows the tags."""
    meta = await models_store.get_model(db, name=name, version=version, team=principal.scope)
    if not principal.may_manage(meta.owner):
        raise Forbidden(f"model {meta.ref} belongs to {meta.owner}; only they or an admin may change it", field="owner")
    if body.trusted is not None and not principal.is_admin:
        raise Forbidden("only an admin may mark a model trusted", field="trusted")
    updated = await models_store.update_model(db, name=meta.name, version=meta.version, changes=body)
    if body.trusted is not None:
        changed = await jobs_store.set_model_trusted(db, model_ref=meta.ref, trusted=body.trusted)
        log.info("model %s marked trusted=%s by %s (%d unfinished jobs updated)", meta.ref, body.trusted, principal.user, changed)
    if body.tags is not None:
        await leaderboard_store.set_model_tags(db, model_ref=meta.ref, tags=updated.tags)
    return updated


@router.delete("/{name}/{version}", status_code=204, response_class=Response)
async def delete_model(name: str, version: str, db: Db, principal: Submitter) -> Response:
    """Delete a model no unfinished job uses (409 otherwise); only its owner or an admin may (403)."""
    meta = await models_store.get_model(db, name=name, version=version, team=principal.scope)
    if not principal.may_manage(meta.owner):
        raise Forbidden(f"model {meta.ref} belongs to {meta.owner}; only they or an admin may delete it", field="owner")
    if await jobs_store.model_in_use(db, model_ref=f"{name}:{version}"):
        raise Conflict(f"model {name}:{version} is used by a job that has not finished", field="version")
    await models_store.delete_model(db, name=name, version=version)
    return Response(status_code=204)
