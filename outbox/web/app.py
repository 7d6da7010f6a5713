"""The ASGI application: :func:`create_app` builds it; an application can mount it
(``parent.mount("/outbox", create_app(settings))``) or run it with ``outbox serve``.

Routes: ``/api/...`` (JSON, OpenAPI at ``/api/openapi.json``, a plain reference page at
``/api/docs``), ``/healthz``, ``/readyz``, ``/login``, ``/logout``, ``/portal/enter``, the
console pages (``/``) and the portal pages (``/portal/...``). Every API route needs the
operator (``/api/portal/...``: a portal session); see :mod:`outbox.web.auth`.
"""

from __future__ import annotations

import html
from typing import Any

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from outbox._db import queries
from outbox._db.connection import connect, render, translated
from outbox.admin.migrations import available
from outbox.admin.portal import WebSettings, web_settings
from outbox.errors import OutboxError
from outbox.settings import Settings
from outbox.web import (
    api_endpoints,
    api_filters,
    api_keys,
    api_ops,
    api_portal,
    api_types,
    auth,
    catalog_pages,
    console,
    errors,
    openapi,
    portal_pages,
)

PUBLIC_PATHS = frozenset({"/healthz", "/readyz", "/login", "/logout", "/portal/enter",
                          "/api/openapi.json", "/api/docs",
                          "/api/public-keys/{endpoint_id}"})  # public keys (api_keys)
"""Routes that answer without credentials (the tests check every other one refuses)."""


class _TooLarge(StarletteHTTPException):
    """Raised from the body stream; an HTTPException so that a route's body parsing lets
    it through (any other error there becomes a 400)."""

    def __init__(self, limit: int) -> None:
        super().__init__(413, f"request body over {limit} bytes")


class BodyLimit:
    """Refuse a request body over ``limit`` bytes with 413 ``body_too_large`` before the
    route runs (by ``Content-Length``, or while a chunked body streams in)."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = dict(scope["headers"]).get(b"content-length")
        if length is not None and not length.isdigit():
            bad = errors.error_response(400, "bad_request", "Content-Length is not a number")
            await bad(scope, receive, send)
            return
        if length is not None and int(length) > self.limit:
            await self._refuse(scope, receive, send)
            return
        seen = 0
        started = False

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > self.limit:
                raise _TooLarge(self.limit)
            return message

        async def tracked(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counted, tracked)
        except _TooLarge:
            if started:
                raise
            await self._refuse(scope, receive, send)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send) -> None:
        response = errors.error_response(
            413, "body_too_large", f"request body over {self.limit} bytes")
        await response(scope, receive, send)


CSP = ("default-src 'self'; script-src 'none'; object-src 'none'; base-uri 'none'; "
       "form-action 'self'; frame-ancestors 'self'; img-src 'self' data:; style-src 'self'")
FRAME_HEADERS = ((b"content-security-policy", CSP.encode()),
                 (b"x-frame-options", b"SAMEORIGIN"), (b"x-content-type-options", b"nosniff"),
                 (b"referrer-policy", b"no-referrer"))
PRIVATE_HEADERS = ((b"cache-control", b"no-store"),)
"""On every answer but the stylesheet: it may hold a session's data (pages, payloads,
secrets), so no browser or proxy cache keeps it."""


class SecurityHeaders:
    """Every answer may be framed only by pages of its own origin (the console and the
    portal are linked to, never embedded elsewhere: no clickjacking of their buttons), is
    never content-sniffed, runs no script (CSP: the pages have none; a stored payload that
    slipped past escaping would not run), sends no ``Referer``, and, except the static
    stylesheet, is never cached (``no-store``) and varies with the credentials
    (``Vary: Cookie, Authorization``). A header the route set itself is left as it is."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        static = str(scope.get("path", "")).endswith("/static/outbox.css")
        extra = FRAME_HEADERS if static else FRAME_HEADERS + PRIVATE_HEADERS

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                present = {name.lower() for name, _ in headers}
                headers += [h for h in extra if h[0] not in present]
                if not static:
                    headers = [h for h in headers if h[0].lower() != b"vary"]
                    vary = {v.strip() for n, v in message.get("headers", [])
                            if n.lower() == b"vary" for v in v.split(b",")}
                    vary |= {b"Cookie", b"Authorization"}
                    headers.append((b"vary", b", ".join(sorted(vary))))
                message["headers"] = headers
            await send(message)

        await self.app(scope, receive, with_headers)


def _health_router() -> APIRouter:
    router = APIRouter(include_in_schema=False)

    @router.get("/healthz")
    def healthz() -> dict[str, str]:
        """The process answers (no database check: that is /readyz)."""
        return {"status": "ok"}

    @router.get("/readyz")
    def readyz(request: Request) -> JSONResponse:
        """The database answers and every migration of this version is applied."""
        settings = auth.web_settings(request)
        try:
            with connect(settings, autocommit=True, connect_timeout=3) as conn, translated():
                rows = conn.execute(render(queries.MIGRATIONS_APPLIED,
                                           settings.schema_name).encode()).fetchall()
        except OutboxError as exc:  # the details (host, a masked URL...) go to the log only
            errors.log.warning("readyz: the database is not ready: %s", exc)
            return errors.error_response(503, "not_ready", "the database is not reachable or "
                                         "not ready (details in the server log)")
        missing = sorted({m.version for m in available()} - {int(str(r[0])) for r in rows})
        if missing:
            return errors.error_response(503, "not_ready",
                                         f"migrations {missing} not applied: outbox migrate")
        return JSONResponse({"status": "ready"})

    return router


def _docs_router() -> APIRouter:
    router = APIRouter(include_in_schema=False)

    @router.get("/api/docs", response_class=HTMLResponse)
    def docs(request: Request) -> str:
        """The API's routes from the OpenAPI document, as one plain page (no scripts, nothing
        from a CDN)."""
        spec: dict[str, Any] = request.app.openapi()
        rows = []
        for path, ops in spec.get("paths", {}).items():
            for method, op in ops.items():
                what = html.escape(op.get("description") or op.get("summary", ""))
                rows.append(f"<tr><td>{method.upper()}</td><td><code>{html.escape(path)}"
                            f"</code></td><td>{what}</td></tr>")
        return ("<!doctype html><html lang=en><head><meta charset=utf-8><title>outbox API"
                "</title><meta name=viewport content='width=device-width'></head><body>"
                "<h1>outbox HTTP API</h1><p>Machine-readable: <a href=openapi.json>openapi.json"
                "</a>. Send <code>Authorization: Bearer $OUTBOX_ADMIN_TOKEN</code>.</p>"
                "<table><tr><th>method</th><th>path</th><th>what</th></tr>"
                + "".join(rows) + "</table></body></html>")

    return router


def create_app(settings: Settings | None = None) -> FastAPI:
    """The web app over ``settings`` (default: the environment's); see the module doc."""
    web: WebSettings = web_settings(settings)
    app = FastAPI(title="outbox", version="1", openapi_url="/api/openapi.json",
                  docs_url=None, redoc_url=None)
    app.state.settings = web
    app.state.login_guard = auth.LoginGuard()
    openapi.install(app)
    errors.install(app)
    api = APIRouter(prefix="/api")
    operator = [Depends(auth.require_operator), Depends(auth.verify_csrf)]
    api.include_router(api_endpoints.router, dependencies=operator)
    api.include_router(api_keys.router)  # public keys only, for receivers: no credentials
    api.include_router(api_filters.router, dependencies=operator)
    api.include_router(api_ops.router, dependencies=operator)
    api.include_router(api_types.router, dependencies=operator)
    api.include_router(api_portal.router,
                       dependencies=[Depends(auth.require_portal), Depends(auth.verify_csrf)])
    api.include_router(api_filters.portal_router,
                       dependencies=[Depends(auth.require_portal), Depends(auth.verify_csrf)])
    app.include_router(api)
    app.include_router(_health_router())
    app.include_router(_docs_router())
    app.include_router(auth.router)
    # Pages (outbox/web/console.py, portal_pages.py): each route takes its own auth and CSRF
    # dependencies; tests/web/test_auth.py checks every route refuses without them.
    app.include_router(console.router, include_in_schema=False)
    app.include_router(portal_pages.router, prefix="/portal", include_in_schema=False)
    app.include_router(catalog_pages.console_router, include_in_schema=False)
    app.include_router(catalog_pages.portal_router, prefix="/portal", include_in_schema=False)
    app.add_middleware(BodyLimit, limit=web.max_body_bytes)
    app.add_middleware(SecurityHeaders)
    return app
