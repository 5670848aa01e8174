"""The pages' login: a user token pasted once, kept as an HttpOnly, SameSite=Strict session cookie."""

from __future__ import annotations

from urllib.parse import urlencode

from fastapi import APIRouter, Form, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from leader.api import deps
from leader.auth.tokens import SESSION_COOKIE
from leader.web.render import render

COOKIE_MAX_AGE_S = 8 * 3600

router = APIRouter(include_in_schema=False)


async def _principal_ok(request: Request, token: str) -> bool:
    """Whether a token may read the pages: a user token (never an agent credential)."""
    principal = await deps.authenticate(deps.get_resources(request), token)
    return principal is not None and principal.role not in ("follower", "join")


class LoginRequired(Exception):
    """The page needs the login cookie."""


async def require_login(request: Request) -> None:
    """Pages redirect to /login without a valid session cookie."""
    token = request.cookies.get(SESSION_COOKIE)
    if not token or not await _principal_ok(request, token):
        raise LoginRequired()


def _safe_next(target: str) -> str:
    # Only local paths: an open redirect would let a link send a logged-in user anywhere.
    return target if target.startswith("/") and not target.startswith("//") and "\\" not in target else "/leaderboard"


@router.get("/login", response_class=HTMLResponse)
async def login_page(next: str = "/leaderboard") -> HTMLResponse:  # noqa: A002
    """The login form."""
    return HTMLResponse(render("login.html", next=_safe_next(next), error=None))


@router.post("/login")
async def login(request: Request, token: str = Form(""), next: str = Form("/leaderboard")) -> Response:  # noqa: A002
    """Check the token and set it as an HttpOnly, SameSite=Strict cookie."""
    if not token or not await _principal_ok(request, token):
        return HTMLResponse(render("login.html", next=_safe_next(next), error="unknown token"), status_code=401)
    response = RedirectResponse(_safe_next(next), status_code=303)
    response.set_cookie(
        SESSION_COOKIE,
        token,
        max_age=COOKIE_MAX_AGE_S,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
        path="/",
    )
    return response


@router.post("/logout")
async def logout() -> Response:
    """Forget the session cookie."""
    response = RedirectResponse("/login", status_code=303)
    response.delete_cookie(SESSION_COOKIE, path="/")
    return response


async def login_redirect(request: Request, exc: Exception) -> Response:
    """A page that needs the login sends the browser to it, and back afterwards."""
    target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    return RedirectResponse("/login?" + urlencode({"next": target}), status_code=303)
