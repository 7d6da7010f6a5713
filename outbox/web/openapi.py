"""The OpenAPI document as the contract the server keeps: who may call each operation
(security schemes), every error status it can answer with the one error body, and the
formats and lengths of the parameters the server checks. FastAPI's generated document is
the base; this module adds what it cannot know (auth is a dependency, errors are handlers).

Security: operator operations take ``Authorization: Bearer $OUTBOX_ADMIN_TOKEN``
(``operatorBearer``) or the console's session cookie (``operatorCookie``, plus the
``X-CSRF-Token`` header on unsafe methods); portal operations take the portal session
cookie (``portalCookie``, plus ``X-CSRF-Token`` on unsafe methods). The public-keys route
(``/api/public-keys/{endpoint_id}``, :mod:`outbox.web.api_keys`) takes none.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from outbox.admin.endpoint_options import TEXT_PATTERN
from outbox.web.auth import OPERATOR_COOKIE, PORTAL_COOKIE

ERROR = {"type": "object", "required": ["error"], "additionalProperties": False,
         "properties": {"error": {
             "type": "object", "required": ["code", "message"],
             "properties": {"code": {"type": "string"}, "message": {"type": "string"}}}}}
SCHEMES = {
    "operatorBearer": {"type": "http", "scheme": "bearer",
                       "description": "OUTBOX_ADMIN_TOKEN"},
    "operatorCookie": {"type": "apiKey", "in": "cookie", "name": OPERATOR_COOKIE,
                       "description": "the console's session (POST /login)"},
    "portalCookie": {"type": "apiKey", "in": "cookie", "name": PORTAL_COOKIE,
                     "description": "a portal session (GET /portal/enter?token=...)"},
    "csrfHeader": {"type": "apiKey", "in": "header", "name": "X-CSRF-Token",
                   "description": "the session's CSRF token, on unsafe methods"},
}
_UUID = {"type": "string", "format": "uuid", "minLength": 36, "maxLength": 36,
         "pattern": "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-"
                    "[0-9a-fA-F]{12}$"}
_TENANT = {"type": "string", "minLength": 1, "maxLength": 128,
           "pattern": TEXT_PATTERN}
_TYPE = {"type": "string", "minLength": 1, "maxLength": 128,
         "pattern": "^[A-Za-z0-9][A-Za-z0-9._:/-]*$"}
_WHEN = {"type": "string", "maxLength": 64,
         "pattern": "^([1-9][0-9]{0,2}[smhd]|(19[7-9][0-9]|20[0-9]{2})-(0[1-9]|1[0-2])-"
        "(0[1-9]|1[0-9]|2[0-8])T([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9]Z)$",
         "description": "a time ago (90s, 30m, 2h, 7d) or an ISO 8601 time after 1970"}
# What the server checks of each parameter, by name (documented, not re-validated here)
PARAMETERS: dict[str, dict[str, Any]] = {
    "endpoint_id": _UUID, "event_id": _UUID, "after": _UUID, "endpoint": _UUID,
    "before": _UUID, "tenant": _TENANT, "type": _TYPE, "event_type": _TYPE,
    "since": _WHEN, "until": _WHEN,
    "cursor": {"type": "string", "minLength": 1, "maxLength": 128,
               "description": "next_cursor of a previous page (opaque)"},
}
_UNSAFE = frozenset({"post", "put", "patch", "delete"})
_CONFLICTS = ("/replay", "/skip", "/rotate-secret")
_CREATES_UNIQUE = ("/api/types",)
_PUBLIC = ("/api/public-keys/",)  # answers without credentials (outbox.web.app.PUBLIC_PATHS)


def install(app: FastAPI) -> None:
    """Serve :func:`document` as ``app``'s OpenAPI document."""
    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = document(app)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def document(app: FastAPI) -> dict[str, Any]:
    """FastAPI's document of ``app`` with security, error responses and parameter formats."""
    spec = get_openapi(title=app.title, version=app.version, routes=app.routes,
                       description="outbox HTTP API: operator (/api) and portal (/api/portal)")
    components = spec.setdefault("components", {})
    components.setdefault("schemas", {})["Error"] = ERROR
    components["securitySchemes"] = SCHEMES
    for path, operations in spec.get("paths", {}).items():
        for method, op in operations.items():
            _operation(path, method, op)
    return spec


def _security(path: str, unsafe: bool) -> list[dict[str, list[str]]]:
    if path.startswith(_PUBLIC):
        return []
    if path.startswith("/api/portal/"):
        return [{"portalCookie": [], "csrfHeader": []} if unsafe else {"portalCookie": []}]
    return [{"operatorBearer": []},
            {"operatorCookie": [], "csrfHeader": []} if unsafe else {"operatorCookie": []}]


def _operation(path: str, method: str, op: dict[str, Any]) -> None:
    unsafe = method in _UNSAFE
    op["security"] = _security(path, unsafe)
    for param in op.get("parameters", []):
        known = PARAMETERS.get(param["name"])
        if known is not None:
            param["schema"] = dict(known)
    names = {p["name"] for p in op.get("parameters", [])}
    statuses = {"401": "no or wrong credentials", "422": "a parameter or the body is invalid",
                "503": "the database is unavailable or not migrated"}
    if path.startswith(_PUBLIC):
        del statuses["401"]
    if unsafe:
        statuses["403"] = "a cookie session without its CSRF token"
    if "{" in path or unsafe or "endpoint" in names:
        statuses["404"] = "no such endpoint, event or delivery (or not this tenant's)"
    if names & {"cursor", "before"}:
        statuses["400"] = "a cursor this API did not return"
    if "requestBody" in op:
        statuses.update({"400": "a Content-Length that is not a number",
                         "413": "the body is over OUTBOX_WEB_MAX_BODY_BYTES"})
    if path.endswith(_CONFLICTS):
        statuses["409"] = "refused in the current state (e.g. a disabled endpoint)"
    if method == "post" and path.endswith(_CREATES_UNIQUE):
        statuses["409"] = "already exists (an event type of that name)"
    responses = op.setdefault("responses", {})
    for status, what in statuses.items():
        responses[status] = {"description": what, "content": {
            "application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}
