"""The model repository and the data sets in the browser: what is stored, which jobs used it; upload and delete.

Uploads and deletions are the API's own routes (the same checks, the same 4xx naming the field), called by the page's
script (static/console.js) with the session's CSRF token; a viewer sees no controls, and the API refuses its posts.
"""

from __future__ import annotations

from typing import get_args

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from common.formats.datasets import DATA_FORMATS
from common.wire.models import ModelFormat
from leader.api import deps
from leader.store import datasets as data_store
from leader.store import jobs as jobs_store
from leader.store import models as models_store
from leader.web.login import require_login
from leader.web.render import render

router = APIRouter(include_in_schema=False)


@router.get("/models", response_class=HTMLResponse)
async def models_page(request: Request) -> HTMLResponse:
    """Every model of the caller's team (every team's for an admin): name, version, format, size, checksum, what it is
    (architecture and parameters for a language model), trusted, tags, the jobs that used it; upload and delete. Then
    the data sets (request data, traces, prompt sets) the same way."""
    principal = await require_login(request)
    db = deps.get_db(request)
    models = await models_store.list_models(db, team=principal.scope)
    used = await jobs_store.jobs_per_model(db, model_refs=[m.ref for m in models])
    data = await data_store.list_all(db, team=principal.scope)
    html = render(
        "models.html",
        csrf=request.state.csrf,
        models=models,
        used=used,
        data=data,
        may_upload=principal.at_least("submitter"),
        is_admin=principal.is_admin,
        model_formats=get_args(ModelFormat),
        data_formats=DATA_FORMATS,
    )
    return HTMLResponse(html)
