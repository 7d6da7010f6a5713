"""Every error leaves the API as JSON ``{"error": {"code": ..., "message": ...}}``.

The ``code`` is stable (clients branch on it); the message is one line for people.
Refusals of bad input are 4xx and change nothing (the library validates before SQL);
only an unexpected failure is a 500 (``internal_error``, no traceback in the answer).
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, RedirectResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from outbox import errors
from outbox.admin.endpoint_oauth2 import OAuth2Fields
from outbox.admin.endpoint_options import CredentialChanges, EndpointOptions
from outbox.admin.events import EventNotFound
from outbox.admin.portal import InvalidToken

log = logging.getLogger("outbox.web")

# Most specific first: the first isinstance match wins.
_OUTBOX_ERRORS: list[tuple[type[Exception], int, str]] = [
    (errors.EndpointNotFound, 404, "endpoint_not_found"),
    (errors.DeliveryNotFound, 404, "delivery_not_found"),
    (EventNotFound, 404, "event_not_found"),
    (errors.EventTypeNotFound, 404, "event_type_not_found"),
    (errors.EventTypeExists, 409, "event_type_exists"),
    (errors.InvalidEventType, 422, "invalid_event_type"),
    (errors.InvalidEndpoint, 422, "invalid_endpoint"),
    (errors.InvalidEvent, 422, "invalid_parameter"),
    (errors.OperationRefused, 409, "operation_refused"),
    (InvalidToken, 401, "invalid_token"),
    (errors.ConfigurationError, 503, "not_configured"),
    (errors.DatabaseUnavailable, 503, "database_unavailable"),
    (errors.SchemaMissing, 503, "schema_missing"),
]
_HTTP_CODES = {400: "bad_request", 401: "unauthorized", 403: "forbidden", 404: "not_found",
               405: "method_not_allowed", 409: "conflict", 413: "body_too_large",
               415: "unsupported_media_type", 422: "invalid_request"}


class ApiError(Exception):
    """Raised by a route: answered as ``status`` with ``code`` and ``message``."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


class NotAuthenticated(StarletteHTTPException):
    """No valid operator credentials (``realm`` "operator") or portal session ("portal").
    A 401 HTTPException, so pages may catch it; the app answers it with :func:`install`'s
    handler (JSON 401, or for a page a 303 to ``/login``)."""

    def __init__(self, realm: str) -> None:
        super().__init__(401, f"{realm} authentication required")
        self.realm = realm


class CsrfRefused(StarletteHTTPException):
    """An unsafe request authenticated by cookie without the session's CSRF token (403)."""

    def __init__(self) -> None:
        super().__init__(403, "missing or wrong CSRF token")


def error_response(status: int, code: str, message: str,
                   headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": {"code": code, "message": message}}, status_code=status,
                        headers=headers)


def _wants_html(request: Request) -> bool:
    path = request.url.path[len(request.scope.get("root_path", "")):]
    return not path.startswith("/api/") and "text/html" in request.headers.get("accept", "")


async def _outbox_error(request: Request, exc: Exception) -> Response:
    for kind, status, code in _OUTBOX_ERRORS:
        if isinstance(exc, kind):
            return error_response(status, code, str(exc))
    if isinstance(exc, errors.DatabaseError):
        log.error("database error on %s %s: %s", request.method, request.url.path, exc)
        return error_response(500, "database_error", "the database refused the request")
    return error_response(400, "refused", str(exc))


# Body fields defined by outbox.admin.endpoint_options: refused as the library refuses them
_ENDPOINT_FIELDS = frozenset({*EndpointOptions.model_fields, *OAuth2Fields.model_fields,
                              "headers", *CredentialChanges.model_fields})


async def _validation(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    first: dict[str, Any] = exc.errors()[0] if exc.errors() else {}
    loc = tuple(first.get("loc", ()))
    where = ".".join(str(p) for p in loc if p != "body")
    code, shown = "invalid_request", ""
    if (len(loc) >= 2 and loc[0] == "body" and loc[1] in _ENDPOINT_FIELDS
            and first.get("type") != "extra_forbidden"):
        code = "invalid_endpoint"
        got = first.get("input")
        if loc[1] in EndpointOptions.model_fields and isinstance(got, int | float):
            # never echo text back (a header value, a credential)
            shown = f" (got {got!r})"
    return error_response(422, code, f"{where or 'request'}: {first.get('msg')}{shown}")


async def _http(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, StarletteHTTPException)
    code = _HTTP_CODES.get(exc.status_code, "error")
    headers = dict(exc.headers or {})
    if exc.status_code == 405:  # every method of the path, not the first route's alone
        headers["Allow"] = ", ".join(allowed_methods(request))
    return error_response(exc.status_code, code, str(exc.detail), headers=headers)


def allowed_methods(request: Request) -> list[str]:
    """The methods some route of the app answers at this request's path."""
    root = request.scope.get("root_path", "")
    path = request.url.path[len(root):] if root else request.url.path
    found: set[str] = set()
    for route in request.app.router.routes:
        contexts = getattr(route, "effective_route_contexts", None)
        candidates = contexts() if contexts is not None else [route]
        for ctx in candidates:
            regex = getattr(ctx, "path_regex", None)
            if regex is not None and regex.match(path):
                found.update(getattr(ctx, "methods", None) or ())
    return sorted(found)


async def _api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return error_response(exc.status, exc.code, exc.message)


async def _not_authenticated(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, NotAuthenticated)
    root = request.scope.get("root_path", "")
    if exc.realm == "operator":
        if _wants_html(request) and request.method == "GET":
            return RedirectResponse(f"{root}/login?next={request.url.path}", status_code=303)
        return error_response(401, "unauthorized", "operator credentials required: "
                              "Authorization: Bearer $OUTBOX_ADMIN_TOKEN, or sign in",
                              headers={"WWW-Authenticate": "Bearer"})
    return error_response(401, "portal_session_required",
                          "no portal session: open a fresh portal link")


async def _csrf(request: Request, exc: Exception) -> Response:
    return error_response(403, "csrf_failed",
                          "missing or wrong CSRF token (csrf_token field or X-CSRF-Token)")


async def _unexpected(request: Request, exc: Exception) -> Response:
    log.exception("unexpected error on %s %s", request.method, request.url.path)
    return error_response(500, "internal_error", "internal error (logged on the server)")


def install(app: FastAPI) -> None:
    """Register the handlers above on ``app``."""
    app.add_exception_handler(errors.OutboxError, _outbox_error)
    app.add_exception_handler(ValueError, _value_error)
    app.add_exception_handler(RequestValidationError, _validation)
    app.add_exception_handler(StarletteHTTPException, _http)
    app.add_exception_handler(ApiError, _api_error)
    app.add_exception_handler(NotAuthenticated, _not_authenticated)
    app.add_exception_handler(CsrfRefused, _csrf)
    app.add_exception_handler(Exception, _unexpected)


async def _value_error(request: Request, exc: Exception) -> Response:
    """The library's ``ValueError``: a bad limit, range or time (raised before SQL)."""
    return error_response(422, "invalid_parameter", str(exc))
