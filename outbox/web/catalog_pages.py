"""The event catalog's pages: the console's (``/types``: every type, register one, edit,
deprecate, remove; the operator session and CSRF as every console page) and the portal's
(``/portal/catalog``: the types the session's tenant is offered, with schema and example;
any other name answers 404, as if it did not exist). Data from :mod:`outbox.admin.types`.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

import psycopg
from fastapi import APIRouter, Depends, Form, Request
from fastapi.responses import HTMLResponse, Response

from outbox.admin import types as catalog
from outbox.web import console, portal_pages
from outbox.web.auth import web_settings
from outbox.web.deps import connection
from outbox.web.pages import BAD_INPUT, NOT_FOUND, REFUSED, error_page, render, see_other

console_router = APIRouter()
portal_router = APIRouter()
Conn = Annotated[psycopg.Connection[Any], Depends(connection)]
NOTICES = {"added": "Event type registered.", "saved": "Event type saved.",
           "deprecated": "Event type deprecated.", "current": "Event type current again.",
           "removed": "Event type removed."}


def _schema(request: Request) -> str:
    return web_settings(request).schema_name


def _view(entry: catalog.EventType) -> dict[str, Any]:
    """The entry with its schema and example pretty-printed for a ``<pre>``."""
    return {"t": entry, "schema_text": "" if entry.json_schema is None else
            json.dumps(entry.json_schema, indent=2, ensure_ascii=False),
            "example_text": "" if entry.example is None else
            json.dumps(entry.example, indent=2, ensure_ascii=False)}


def _json_field(name: str, text: str) -> Any:
    """A form's JSON text (empty: None); ValueError naming the field."""
    if not text.strip():
        return None
    try:
        return json.loads(text)
    except ValueError as exc:
        raise ValueError(f"{name} is not JSON: {exc}") from None


@console_router.get("/types", response_class=HTMLResponse, include_in_schema=False)
def types_page(request: Request, page: console.Page, conn: Conn,
               done: str | None = None) -> Response:
    """Every registered type, and the form to register one."""
    return _list(request, page, conn, notice=NOTICES.get(done or ""))


def _list(request: Request, page: dict[str, Any], conn: psycopg.Connection[Any], *,
          notice: str | None = None, error: str | None = None,
          form: dict[str, str] | None = None, status: int = 200) -> Response:
    found = catalog.list_all(conn, schema=_schema(request))
    return render(request, "types.html", {
        **page, "page": "types", "types": found, "notice": notice, "error": error,
        "form": form or {}, "base": "/types"}, status_code=status)


@console_router.post("/types", response_class=HTMLResponse, include_in_schema=False)
def add_type(request: Request, page: console.Page, _: console.Posted, conn: Conn,
             name: Annotated[str, Form()] = "", description: Annotated[str, Form()] = "",
             json_schema: Annotated[str, Form()] = "", example: Annotated[str, Form()] = ""
             ) -> Response:
    """Register a type (nothing is written on a refusal: the form comes back)."""
    try:
        catalog.add(conn, name.strip(), schema=_schema(request),
                    json_schema=_json_field("schema", json_schema), description=description,
                    example=_json_field("example", example))
    except BAD_INPUT as exc:
        form = {"name": name, "description": description, "schema": json_schema,
                "example": example}
        return _list(request, page, conn, error=str(exc), form=form, status=400)
    return see_other(request, "/types?done=added")


@console_router.get("/types/{name:path}", response_class=HTMLResponse,
                    include_in_schema=False)
def type_page(request: Request, name: str, page: console.Page, conn: Conn,
              done: str | None = None) -> Response:
    """One type: description, schema, example; edit, deprecate, remove."""
    try:
        entry = catalog.get(conn, name, schema=_schema(request))
    except NOT_FOUND as exc:
        return error_page(request, exc, page)
    return render(request, "event_type.html", {
        **page, "page": "types", **_view(entry), "notice": NOTICES.get(done or ""),
        "base": "/types"})


@console_router.post("/types/{name:path}", response_class=HTMLResponse,
                     include_in_schema=False)
def change_type(request: Request, name: str, page: console.Page, _: console.Posted,
                conn: Conn, action: Annotated[str, Form()] = "save",
                description: Annotated[str, Form()] = "",
                json_schema: Annotated[str, Form()] = "",
                example: Annotated[str, Form()] = "") -> Response:
    """``action``: save (description, schema, example), deprecate, undeprecate, remove."""
    sch = _schema(request)
    try:
        if action == "remove":
            catalog.remove(conn, name, schema=sch)
            return see_other(request, "/types?done=removed")
        if action in ("deprecate", "undeprecate"):
            catalog.deprecate(conn, name, schema=sch, deprecated=action == "deprecate")
            done = "deprecated" if action == "deprecate" else "current"
        elif action == "save":
            catalog.update(conn, name, schema=sch, description=description,
                           json_schema=_json_field("schema", json_schema),
                           example=_json_field("example", example))
            done = "saved"
        else:
            raise ValueError(f"no such action {action!r}")
    except REFUSED as exc:
        return error_page(request, exc, page)
    return see_other(request, f"/types/{name}?done={done}")


@portal_router.get("/catalog", response_class=HTMLResponse, include_in_schema=False)
def portal_catalog(request: Request, page: portal_pages.Page, conn: Conn) -> Response:
    """The types this tenant's endpoints may subscribe to."""
    found = catalog.offered(conn, page["tenant"], schema=_schema(request))
    return render(request, "types.html", {**page, "page": "catalog", "types": found,
                                          "base": "/portal/catalog"})


@portal_router.get("/catalog/{name:path}", response_class=HTMLResponse,
                   include_in_schema=False)
def portal_type(request: Request, name: str, page: portal_pages.Page, conn: Conn) -> Response:
    """One offered type with its schema and example (404 for any other name)."""
    try:
        entry = catalog.get_offered(conn, name, page["tenant"], schema=_schema(request))
    except NOT_FOUND as exc:
        return error_page(request, exc, page)
    return render(request, "event_type.html", {**page, "page": "catalog", **_view(entry),
                                               "base": "/portal/catalog"})
