"""Who may call what: operators (admin token or login session) and portal sessions.

- **Operators** send ``Authorization: Bearer $OUTBOX_ADMIN_TOKEN`` (compared in constant
  time), or sign in at ``/login`` with that token and get a session cookie (``Secure``,
  ``HttpOnly``, ``SameSite=Strict``), signed (:mod:`outbox.admin.portal`) and bound to the token:
  changing ``OUTBOX_ADMIN_TOKEN`` ends every session; ``POST /logout`` ends this one on the
  server too (a copied cookie is refused from then on). No token configured: nobody is an
  operator (``outbox serve`` makes a one-off token for loopback use).
- **Portal sessions** start at ``/portal/enter?token=...`` (a link from
  :func:`outbox.admin.portal.mint_link`) and carry exactly one tenant. Their cookie is
  ``SameSite=Lax``, not Strict, so that a link clicked in an e-mail (a cross-site
  navigation) still lands signed in; every unsafe request still needs the CSRF token.
- **CSRF.** Every unsafe method (POST, PUT, PATCH, DELETE) authenticated by a cookie must
  carry the session's token in a ``csrf_token`` form field or an ``X-CSRF-Token`` header
  (:func:`verify_csrf`); Bearer-token calls need none (a browser cannot add that header
  cross-site without a CORS preflight, which this app never grants).
"""

from __future__ import annotations

import collections
import hashlib
import hmac
import secrets
import threading
import time
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Form, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.templating import Jinja2Templates

from outbox._db.connection import connect
from outbox.admin import sessions
from outbox.admin.portal import InvalidToken, WebSettings, open_link, open_token, sign, signing_key
from outbox.web.errors import CsrfRefused, NotAuthenticated, error_response

OPERATOR_COOKIE = "outbox_session"
PORTAL_COOKIE = "outbox_portal"
LOGIN_COOKIE = "outbox_login"
_UNSAFE = frozenset({"POST", "PUT", "PATCH", "DELETE"})

templates = Jinja2Templates(directory=str(Path(__file__).parent / "templates"))
router = APIRouter(include_in_schema=False)


def web_settings(request: Request) -> WebSettings:
    """The app's settings (set by :func:`outbox.web.create_app`)."""
    settings: WebSettings = request.app.state.settings
    return settings


def _token_tag(settings: WebSettings) -> str:
    """A short digest of the admin token: sessions minted under another token are void."""
    token = settings.admin_token.get_secret_value().encode()
    return hashlib.sha256(b"outbox-session/" + token).hexdigest()[:16]


def _bearer(request: Request) -> str | None:
    header = request.headers.get("authorization")
    if header is None:
        return None
    scheme, _, value = header.partition(" ")  # another scheme (a proxy's Basic): no token
    return value.strip() if scheme.lower() == "bearer" else None


def _claims(request: Request, cookie: str, role: str) -> dict[str, Any] | None:
    raw = request.cookies.get(cookie)
    if not raw:
        return None
    settings = web_settings(request)
    try:
        claims = open_token(raw, signing_key(settings, "session"))
    except InvalidToken:
        return None
    if claims.get("role") != role or not isinstance(claims.get("csrf"), str):
        return None
    if role == "operator" and claims.get("tag") != _token_tag(settings):
        return None
    if not isinstance(claims.get("sid"), str):  # minted before sessions could end
        return None
    return claims


def _live(request: Request, claims: dict[str, Any] | None) -> dict[str, Any] | None:
    """``claims`` unless a logout ended their session (one lookup per request, on a
    connection of its own: only cookie sessions pay it, never Bearer calls)."""
    if claims is None:
        return None
    settings = web_settings(request)
    with connect(settings, autocommit=True) as conn:
        if sessions.is_revoked(conn, claims["sid"], schema=settings.schema_name):
            return None
    return claims


def is_admin_token(settings: WebSettings, given: str) -> bool:
    """Constant-time comparison with ``OUTBOX_ADMIN_TOKEN`` (never true when it is unset)."""
    admin = settings.admin_token.get_secret_value()
    return bool(admin) and hmac.compare_digest(given.encode(), admin.encode())


def require_operator(request: Request) -> None:
    """Dependency: a valid Bearer admin token or operator session, else 401 (pages: a
    redirect to ``/login``)."""
    bearer = _bearer(request)
    if bearer is not None:
        if is_admin_token(web_settings(request), bearer):
            request.state.auth = "bearer"
            return
        raise NotAuthenticated("operator")
    claims = _live(request, _claims(request, OPERATOR_COOKIE, "operator"))
    if claims is None:
        raise NotAuthenticated("operator")
    request.state.auth = "cookie"
    request.state.csrf = claims["csrf"]


def require_portal(request: Request) -> str:
    """Dependency: the tenant of the request's portal session, else 401."""
    claims = _live(request, _claims(request, PORTAL_COOKIE, "portal"))
    if claims is None or not isinstance(claims.get("tenant"), str):
        raise NotAuthenticated("portal")
    request.state.auth = "cookie"
    request.state.csrf = claims["csrf"]
    tenant: str = claims["tenant"]
    return tenant


def csrf_token(request: Request) -> str:
    """The CSRF token to put in a page's forms ("" when the request has no session)."""
    token = getattr(request.state, "csrf", None)
    if isinstance(token, str):
        return token
    path = request.url.path[len(request.scope.get("root_path", "")):]
    portal = path == "/portal" or path.startswith(("/portal/", "/api/portal/"))
    claims = _claims(request, PORTAL_COOKIE if portal else OPERATOR_COOKIE,
                     "portal" if portal else "operator")
    return str(claims["csrf"]) if claims else ""


async def _given_csrf(request: Request) -> str:
    header = request.headers.get("x-csrf-token")
    if header:
        return header
    content_type = request.headers.get("content-type", "")
    if content_type.startswith(("application/x-www-form-urlencoded", "multipart/form-data")):
        value = (await request.form()).get("csrf_token")
        return value if isinstance(value, str) else ""
    return ""


async def verify_csrf(request: Request) -> None:
    """Dependency (after the auth one): refuse an unsafe cookie-authenticated request
    without the session's CSRF token (403 ``csrf_failed``)."""
    if request.method not in _UNSAFE or getattr(request.state, "auth", None) == "bearer":
        return
    expected = csrf_token(request)
    given = await _given_csrf(request)
    if not expected or not hmac.compare_digest(given.encode(), expected.encode()):
        raise CsrfRefused()


def _set_cookie(response: Response, request: Request, name: str, value: str, max_age: int,
                samesite: str = "strict") -> None:
    response.set_cookie(name, value, max_age=max_age, secure=True, httponly=True,
                        samesite=samesite,  # type: ignore[arg-type]
                        path=(request.scope.get("root_path", "") or "") + "/")


def _session_cookie(settings: WebSettings, claims: dict[str, Any], seconds: int) -> str:
    claims = {**claims, "csrf": secrets.token_urlsafe(24), "sid": secrets.token_urlsafe(24)}
    return sign(claims, signing_key(settings, "session"), time.time() + seconds)


def _safe_next(target: str | None) -> str:
    """A local path to go to after login (never another site)."""
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/"
    return target


class LoginGuard:
    """At most ``limit`` failed sign-ins per client address per ``window`` seconds; past
    that, ``POST /login`` answers 429 with ``Retry-After`` without looking at the token
    (guessing stops). In memory, per process: with N processes the limit is N times; a
    proxy in front must pass the client address (``--forwarded-allow-ips``)."""

    def __init__(self, limit: int = 10, window: float = 300.0) -> None:
        self.limit, self.window = limit, window
        self._failures: dict[str, collections.deque[float]] = {}
        self._lock = threading.Lock()

    def _recent(self, client: str, now: float) -> collections.deque[float]:
        times = self._failures.setdefault(client, collections.deque())
        while times and times[0] <= now - self.window:
            times.popleft()
        return times

    def wait(self, client: str) -> int:
        """Seconds until ``client`` may try again (0: now)."""
        now = time.monotonic()
        with self._lock:
            times = self._recent(client, now)
            if len(times) < self.limit:
                if not times:
                    self._failures.pop(client, None)
                return 0
            return max(1, int(times[0] + self.window - now) + 1)

    def failed(self, client: str) -> None:
        with self._lock:
            self._recent(client, time.monotonic()).append(time.monotonic())
            if len(self._failures) > 100_000:  # bounded memory under a spray of addresses
                self._failures.clear()


def _login_guard(request: Request) -> tuple[LoginGuard, str]:
    """The app's guard and this request's client address."""
    guard = getattr(request.app.state, "login_guard", None)
    if guard is None:
        guard = request.app.state.login_guard = LoginGuard()
    return guard, request.client.host if request.client else ""


@router.get("/login", response_class=HTMLResponse)
def login_page(request: Request, next: str = "/") -> Response:
    """The sign-in form (the admin token as password)."""
    return _login_form(request, _safe_next(next), error=None, status=200)


def _login_form(request: Request, target: str, error: str | None, status: int) -> Response:
    nonce = secrets.token_urlsafe(24)
    response = templates.TemplateResponse(
        request, "login.html",
        {"csrf_token": nonce, "next": target, "error": error,
         "configured": bool(web_settings(request).admin_token.get_secret_value())},
        status_code=status)
    _set_cookie(response, request, LOGIN_COOKIE, nonce, 3600)
    return response


@router.post("/login")
def login(request: Request, token: str = Form(""), csrf_token: str = Form(""),
          next: str = Form("/")) -> Response:
    """Check the token; set the operator session cookie and go to ``next``."""
    nonce = request.cookies.get(LOGIN_COOKIE, "")
    if not nonce or not hmac.compare_digest(csrf_token.encode(), nonce.encode()):
        raise CsrfRefused()
    settings = web_settings(request)
    target = _safe_next(next)
    guard, client = _login_guard(request)
    wait = guard.wait(client)
    if wait:
        refused = _login_form(request, target, "Too many failed sign-ins: wait, then try "
                              "again.", 429)
        refused.headers["Retry-After"] = str(wait)
        return refused
    if not is_admin_token(settings, token):
        guard.failed(client)
        return _login_form(request, target, "That is not the admin token.", 401)
    root = request.scope.get("root_path", "")
    response = RedirectResponse(root + target, status_code=303)
    value = _session_cookie(settings, {"role": "operator", "tag": _token_tag(settings)},
                            settings.session_seconds)
    _set_cookie(response, request, OPERATOR_COOKIE, value, settings.session_seconds)
    response.delete_cookie(LOGIN_COOKIE, path=root + "/")
    return response


@router.post("/logout")
async def logout(request: Request) -> Response:
    """End the operator and portal sessions of this browser (CSRF-checked when signed in):
    on the server (:mod:`outbox.admin.sessions`: a copy of the cookie is refused from now
    on) and in the browser (the cookies are deleted)."""
    live = [c for c in (_claims(request, OPERATOR_COOKIE, "operator"),
                        _claims(request, PORTAL_COOKIE, "portal")) if c]
    if live:
        given = (await _given_csrf(request)).encode()
        if not any(hmac.compare_digest(given, str(c["csrf"]).encode()) for c in live):
            raise CsrfRefused()
        settings = web_settings(request)
        with connect(settings, autocommit=True) as conn:
            for claims in live:
                sessions.revoke(conn, claims["sid"], claims["exp"], schema=settings.schema_name)
    root = request.scope.get("root_path", "")
    response = RedirectResponse(root + "/login", status_code=303)
    for name in (OPERATOR_COOKIE, PORTAL_COOKIE):
        response.delete_cookie(name, path=root + "/", secure=True, httponly=True)
    return response


@router.get("/portal/enter")
def portal_enter(request: Request, token: str = "") -> Response:
    """Open a portal link: a session cookie for its tenant, then ``/portal/``."""
    settings = web_settings(request)
    try:
        tenant = open_link(token, settings)
    except InvalidToken as exc:
        refused = error_response(401, "invalid_link",
                                 f"this portal link is not valid ({exc}): ask for a new one")
        refused.headers.update(LINK_HEADERS)
        return refused
    root = request.scope.get("root_path", "")
    response = RedirectResponse(root + "/portal/", status_code=303, headers=LINK_HEADERS)
    value = _session_cookie(settings, {"role": "portal", "tenant": tenant},
                            settings.portal_session_seconds)
    _set_cookie(response, request, PORTAL_COOKIE, value, settings.portal_session_seconds,
                samesite="lax")
    return response


LINK_HEADERS = {"Referrer-Policy": "no-referrer", "Cache-Control": "no-store"}
"""On ``/portal/enter``: the URL holds the link's token, so no cache keeps the answer and
no browser sends the URL on as a ``Referer``."""
