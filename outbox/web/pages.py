"""What the console and portal pages share: templates, filters, the stylesheet, the login
redirect and the HTML error page.

Pages are plain HTML forms (no JavaScript needed); every POST carries the CSRF token of
:func:`outbox.web.auth.csrf_token` and is checked by :func:`outbox.web.auth.verify_csrf`.
Pages call the library functions the CLI and the JSON API call (one code path); no SQL here.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote

from fastapi import HTTPException, Request
from fastapi.responses import HTMLResponse, RedirectResponse
from fastapi.templating import Jinja2Templates

from outbox.admin import endpoint_oauth2, endpoints, filters
from outbox.admin.events import EventNotFound
from outbox.errors import (
    ConfigurationError,
    DeliveryNotFound,
    EndpointNotFound,
    EventTypeNotFound,
    InvalidEndpoint,
    InvalidEvent,
    InvalidEventType,
    OperationRefused,
)

HERE = Path(__file__).resolve().parent
STATIC = HERE / "static"
STYLESHEET = STATIC / "outbox.css"
templates = Jinja2Templates(directory=str(HERE / "templates"))


def ago(value: dt.datetime | None) -> str:
    """``value`` as "3 min ago" (UTC timestamps from PostgreSQL); "-" for None."""
    if value is None:
        return "-"
    seconds = (dt.datetime.now(dt.UTC) - value).total_seconds()
    return f"{duration(abs(seconds))} {'ago' if seconds >= 0 else 'from now'}"


def duration(seconds: float | None) -> str:
    """A short human duration ("850 ms", "42 s", "7 min", "3 h", "2 d"); "-" for None."""
    if seconds is None:
        return "-"
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f} {unit}"
    return f"{seconds:.0f} s"


def stamp(value: dt.datetime | None) -> str:
    """``value`` as an ISO-8601 UTC timestamp to the second; "-" for None."""
    if value is None:
        return "-"
    return value.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


templates.env.filters.update(ago=ago, duration=duration, stamp=stamp)
# The endpoint form's maxlength attributes: the library's limits, so the form never refuses
# what the API takes (nor offers what it refuses).
templates.env.globals["endpoint_limits"] = {
    "url": endpoints.URL_MAX_LENGTH, "description": endpoints.DESCRIPTION_MAX_LENGTH,
    "oauth2_token_url": endpoint_oauth2.TOKEN_URL_MAX,
    "oauth2_client_id": endpoint_oauth2.CLIENT_ID_MAX,
    "oauth2_client_secret": endpoint_oauth2.CLIENT_SECRET_MAX,
    "oauth2_scope": endpoint_oauth2.SCOPE_MAX, "payload_filter": filters.FILTER_MAX_BYTES,
}


def root(request: Request) -> str:
    """The path the app is mounted at ("" at the server's root), for links."""
    return str(request.scope.get("root_path", "")).rstrip("/")


def login_redirect(request: Request) -> HTTPException:
    """A 303 to the login form that comes back to this page afterwards."""
    here = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    target = f"{root(request)}/login?next={quote(here, safe='')}"
    return HTTPException(status_code=303, headers={"Location": target})


def render(request: Request, name: str, context: Mapping[str, Any], *,
           status_code: int = 200, no_store: bool = False) -> HTMLResponse:
    """Template ``name`` with ``context`` plus ``root`` and ``request``. ``no_store``: the
    page holds a once-only secret, so no cache may keep it."""
    full = {"root": root(request), **context}
    response = templates.TemplateResponse(request, name, full, status_code=status_code)
    if no_store:
        response.headers["Cache-Control"] = "no-store"
    return response


NOT_FOUND = (EndpointNotFound, DeliveryNotFound, EventNotFound, EventTypeNotFound)
BAD_INPUT = (InvalidEndpoint, InvalidEvent, InvalidEventType, ConfigurationError, ValueError)
REFUSED = (*NOT_FOUND, *BAD_INPUT, OperationRefused)  # every refusal error_page answers


def error_page(request: Request, exc: Exception, context: Mapping[str, Any]) -> HTMLResponse:
    """The HTML answer to a refused request: 404 for an unknown id, 409 for a refused
    operation, 400 for bad input; the message is the library's one-line explanation."""
    if isinstance(exc, NOT_FOUND):
        status, heading = 404, "Not found"
    elif isinstance(exc, OperationRefused):
        status, heading = 409, "Refused"
    elif isinstance(exc, BAD_INPUT):
        status, heading = 400, "Bad request"
    else:  # pragma: no cover - callers catch only the kinds above
        raise exc
    return render(request, "error.html", {**context, "heading": heading, "message": str(exc)},
                  status_code=status)


def see_other(request: Request, path: str) -> RedirectResponse:
    """303 to ``path`` under the app's root: the answer to a successful form POST."""
    return RedirectResponse(root(request) + path, status_code=303)
