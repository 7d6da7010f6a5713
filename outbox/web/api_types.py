"""``/api/types``: the operator's event catalog routes, over :mod:`outbox.admin.types` (the
functions ``outbox types ...`` calls), and ``/api/types-export``, the documents of
:mod:`outbox.admin.type_export`."""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, Query, Response
from fastapi.responses import JSONResponse

from outbox.admin import type_export
from outbox.admin import types as catalog
from outbox.admin.endpoint_options import TEXT_PATTERN
from outbox.web.deps import AppSettings, Conn, listing
from outbox.web.models import EventTypeIn, EventTypePatch, TypeName

router = APIRouter(tags=["event types"])


@router.get("/types")
def list_types(conn: Conn, settings: AppSettings) -> JSONResponse:
    """Every registered event type, by name, with its schema and example."""
    found = catalog.list_all(conn, schema=settings.schema_name)
    return listing({"types": [t.as_json() for t in found]})


@router.post("/types", status_code=201)
def create_type(body: EventTypeIn, conn: Conn, settings: AppSettings) -> dict[str, Any]:
    """Register a type (409-free: an existing name is 422 ``invalid_event_type``); the
    schema is checked against draft 2020-12 and the example against the schema."""
    entry = catalog.add(conn, body.name, schema=settings.schema_name,
                        json_schema=body.json_schema, description=body.description,
                        example=body.example, tenants=body.tenants)
    return {"type": entry.as_json()}


@router.get("/types-export")
def export_types(conn: Conn, settings: AppSettings,
                 format: Literal["openapi", "asyncapi", "jsonschema"] = "openapi",
                 title: str = Query("Webhooks", max_length=200, pattern=TEXT_PATTERN),
                 version: str = Query("1.0.0", max_length=50, pattern=TEXT_PATTERN)
                 ) -> JSONResponse:
    """The catalog as OpenAPI 3.1 webhooks, AsyncAPI 3.0 or a JSON Schema bundle (as
    ``outbox types export``)."""
    found = catalog.list_all(conn, schema=settings.schema_name)
    return JSONResponse(type_export.export(found, format, title=title[:200],
                                           version=version[:50]))


@router.get("/types/{name:path}")
def get_type(name: TypeName, conn: Conn, settings: AppSettings) -> dict[str, Any]:
    return {"type": catalog.get(conn, name, schema=settings.schema_name).as_json()}


@router.patch("/types/{name:path}")
def update_type(name: TypeName, body: EventTypePatch, conn: Conn,
                settings: AppSettings) -> dict[str, Any]:
    """Change the fields given (absent ones keep their value), as ``outbox types update``
    and ``deprecate``."""
    given = {("json_schema" if k == "json_schema" else k): getattr(body, k)
             for k in body.model_fields_set if k != "deprecated"}
    entry = catalog.update(conn, name, schema=settings.schema_name,
                           deprecated=body.deprecated, **given)
    return {"type": entry.as_json()}


@router.delete("/types/{name:path}", status_code=204)
def delete_type(name: TypeName, conn: Conn, settings: AppSettings) -> Response:
    catalog.remove(conn, name, schema=settings.schema_name)
    return Response(status_code=204)
