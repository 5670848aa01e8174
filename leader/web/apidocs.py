"""/docs: Swagger UI from the package's own copy (scripts/vendor_web.sh), never a CDN, so it works air-gapped."""

from __future__ import annotations

from fastapi import APIRouter, FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse

from leader.web.render import HERE

VENDOR = HERE / "static" / "vendor" / "swagger-ui"
ASSETS = ("swagger-ui-bundle.js", "swagger-ui.css")

router = APIRouter(include_in_schema=False)


@router.get("/docs", response_class=HTMLResponse)
async def swagger_ui() -> HTMLResponse:
    """The API's interactive reference; 503 naming the build step when the assets were not vendored."""
    if not all((VENDOR / name).is_file() for name in ASSETS):
        return HTMLResponse(
            "<p>Swagger UI is not in this installation: run scripts/vendor_web.sh (or scripts/setup.sh) where it was "
            'built. The API schema itself is at <a href="/openapi.json">/openapi.json</a>.</p>',
            status_code=503,
        )
    return get_swagger_ui_html(
        openapi_url="/openapi.json",
        title="benchfleet leader API",
        swagger_js_url="/static/vendor/swagger-ui/swagger-ui-bundle.js",
        swagger_css_url="/static/vendor/swagger-ui/swagger-ui.css",
        swagger_favicon_url="data:,",  # no icon fetched from anywhere
        swagger_ui_parameters={"validatorUrl": None},  # Swagger UI's default validator badge is fetched from its site
    )


def install(app: FastAPI) -> None:
    """Serve /docs from the package (the app is made with docs_url=None and redoc_url=None: both default to a CDN)."""
    app.include_router(router)
