"""The pages' login: a user token pasted once opens a server-side session; the browser keeps only the session's id,
in an HttpOnly, SameSite=Strict cookie (Secure over HTTPS, a trusted proxy's forwarded scheme included)."""

from __future__ import annotations

from urllib.parse import urlencode, urlsplit

from fastapi import APIRouter, Form, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from common.errors import Forbidden
from leader.api import deps
from leader.auth.tokens import CSRF_FIELD, SESSION_COOKIE, Principal, csrf_token, same_secret
from leader.store import sessions as sessions_store
from leader.web.render import render

COOKIE_MAX_AGE_S = 8 * 3600

router = APIRouter(include_in_schema=False)


def _page_user(principal: Principal | None) -> bool:
    """Whether a principal may read the pages: a user (never an agent credential)."""
    return principal is not None and principal.role not in ("follower", "join")


class LoginRequired(Exception):
    """The page needs the login cookie."""


async def require_login(request: Request) -> Principal:
    """The logged-in user; pages redirect to /login without a valid session cookie. The session's CSRF token is left
    in `request.state.csrf` for the page to carry (base.html: its forms' field and its scripts' header)."""
    session_id = request.cookies.get(SESSION_COOKIE)
    principal = await deps.session_principal(deps.get_resources(request), session_id) if session_id else None
    if session_id is None or principal is None or not _page_user(principal):
        raise LoginRequired()
    request.state.csrf = csrf_token(session_id)
    return principal


def _cross_site(request: Request) -> bool:
    """Whether a browser says the request came from another site: Sec-Fetch-Site other than same-origin (or none: typed
    or bookmarked), the browser's own judgement, which a proxy rewriting Host does not upset; from an older browser
    without it, an Origin whose host is not this leader's. Clients that send neither (the CLI, curl) are not browsers
    carrying someone else's cookie: they pass."""
    site = request.headers.get("sec-fetch-site")
    if site is not None:
        return site not in ("same-origin", "none")
    origin = request.headers.get("origin")
    if origin is None:
        return False
    return origin == "null" or urlsplit(origin).netloc.lower() != request.headers.get("host", "").lower()


def _safe_next(target: str) -> str:
    # Only local paths: an open redirect would let a link send a logged-in user anywhere.
    return target if target.startswith("/") and not target.startswith("//") and "\\" not in target else "/leaderboard"


@router.get("/login", response_class=HTMLResponse)
async def login_page(next: str = "/leaderboard") -> HTMLResponse:  # noqa: A002
    """The login form."""
    return HTMLResponse(render("login.html", next=_safe_next(next), error=None))


@router.post("/login")
async def login(request: Request, token: str = Form(""), next: str = Form("/leaderboard")) -> Response:  # noqa: A002
    """Check the token, open a session, and set its id as an HttpOnly, SameSite=Strict cookie. A form posted from
    another site is refused (login CSRF: it would log the browser into the attacker's account)."""
    if _cross_site(request):
        page = render("login.html", next="/leaderboard", error="log in from this leader's own login page")
        return HTMLResponse(page, status_code=403)
    resources = deps.get_resources(request)
    principal = await deps.authenticate(resources, token) if token else None
    if principal is None or not _page_user(principal):
        return HTMLResponse(render("login.html", next=_safe_next(next), error="unknown token"), status_code=401)
    request.state.principal = principal  # the audit log names who logged in
    session_id = await sessions_store.start(resources.db, principal=principal, token=token, ttl_s=COOKIE_MAX_AGE_S)
    response = RedirectResponse(_safe_next(next), status_code=303)
    response.set_cookie(
        SESSION_COOKIE,
        session_id,
        max_age=COOKIE_MAX_AGE_S,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
        path="/",
    )
    return response


@router.post("/logout")
async def logout(request: Request, csrf: str = Form("")) -> Response:
    """End the session at the leader and forget its cookie (the form carries the session's CSRF token: another site
    cannot log a user out)."""
    if session_id := request.cookies.get(SESSION_COOKIE):
        if not same_secret(csrf, csrf_token(session_id)):
            raise Forbidden("logging out needs the page's CSRF token", field=CSRF_FIELD)
        await sessions_store.end(deps.get_resources(request).db, session_id=session_id)
    response = RedirectResponse("/login", status_code=303)
    response.delete_cookie(SESSION_COOKIE, path="/")
    return response


async def login_redirect(request: Request, exc: Exception) -> Response:
    """A page that needs the login sends the browser to it, and back afterwards."""
    target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    return RedirectResponse("/login?" + urlencode({"next": target}), status_code=303)
