"""The event catalog: the event types an application emits, each with a description, a
JSON Schema (draft 2020-12) its payloads must match, an example payload and a deprecated
flag. Versioning is by name (``invoice.paid.v2`` beside ``invoice.paid``): endpoints
subscribe by exact name, so a receiver opts in to a new shape when it is ready.

Every function validates before any SQL and raises
:class:`~outbox.errors.InvalidEventType` (nothing written) or
:class:`~outbox.errors.EventTypeNotFound`: the schema must be valid against the draft
2020-12 meta-schema and the example must match the schema. Functions run on the caller's
connection: in autocommit mode each call commits on its own, inside a transaction it
commits with it. Every change bumps the catalog version (a trigger), which emitting
processes see within ``OUTBOX_CATALOG_REFRESH_SECONDS`` (this process: at once).
Checking schemas needs the ``catalog`` extra (``jsonschema-rs``).
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.rows import class_row

from outbox._db import queries
from outbox._db.connection import render, translated
from outbox._emit import catalog
from outbox._emit.event import check_tenant, check_type
from outbox.errors import (
    EventTypeExists,
    EventTypeNotFound,
    InvalidEndpoint,
    InvalidEvent,
    InvalidEventType,
)

__all__ = [
    "DESCRIPTION_MAX_LENGTH",
    "EventType",
    "add",
    "check_example",
    "check_name",
    "check_schema",
    "check_subscribable",
    "deprecate",
    "get",
    "get_offered",
    "list_all",
    "offered",
    "put",
    "remove",
    "update",
]

DESCRIPTION_MAX_LENGTH = 2000
_KEEP: Any = object()  # update(): leave this field as it is


@dataclass(frozen=True, slots=True)
class EventType:
    """A catalog entry as stored."""

    name: str
    description: str
    json_schema: dict[str, Any] | None
    example: Any
    deprecated: bool
    tenants: list[str] | None  # the portal offers it to: None every tenant, [] none
    created_at: dt.datetime
    updated_at: dt.datetime

    def offered_to(self, tenant: str) -> bool:
        """Whether the portal shows this type to ``tenant`` (and lets it subscribe)."""
        return self.tenants is None or tenant in self.tenants

    def as_json(self) -> dict[str, Any]:
        """The entry as the CLI's ``--json`` and the API show it."""
        return {"name": self.name, "description": self.description,
                "schema": self.json_schema, "example": self.example,
                "deprecated": self.deprecated, "tenants": self.tenants,
                "created_at": self.created_at.isoformat(),
                "updated_at": self.updated_at.isoformat()}


_ROW = class_row(EventType)


def check_name(name: object) -> str:
    """``name`` if it is a valid event type name (the rule emit applies)."""
    try:
        check_type(name)
    except InvalidEvent as exc:
        raise InvalidEventType(str(exc)) from None
    assert isinstance(name, str)
    return name


def _has_nul(value: object) -> bool:
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(_has_nul(k) or _has_nul(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_has_nul(v) for v in value)
    return False


def _storable(what: str, value: object) -> None:
    """PostgreSQL's jsonb stores no NUL character (``\\u0000``), in a key or a string."""
    if _has_nul(value):
        raise InvalidEventType(f"{what} contains a NUL character (\\u0000), which cannot be "
                               "stored")


def check_schema(schema: object) -> dict[str, Any]:
    """``schema`` if it is a valid draft 2020-12 JSON Schema object, else InvalidEventType."""
    if not isinstance(schema, dict):
        raise InvalidEventType("the JSON Schema must be a JSON object")
    _storable("the JSON Schema", schema)
    declared = schema.get("$schema")
    if declared is not None and declared.rstrip("#") != catalog.DRAFT:
        raise InvalidEventType(
            f"the JSON Schema declares $schema {declared!r}: outbox checks draft 2020-12 "
            f"({catalog.DRAFT}); drop $schema or use that one")
    _import_validator()
    import jsonschema_rs

    try:
        jsonschema_rs.meta.validate(schema)
        jsonschema_rs.Draft202012Validator(schema)
    except jsonschema_rs.ValidationError as exc:
        where = catalog.json_path(list(exc.instance_path))
        raise InvalidEventType(f"invalid JSON Schema at {where}: {exc.message}") from None
    except (ValueError, jsonschema_rs.ReferencingError) as exc:
        raise InvalidEventType(f"invalid JSON Schema: {exc}") from None
    return schema


def _import_validator() -> None:
    try:
        import jsonschema_rs  # noqa: F401
    except ImportError:
        raise InvalidEventType(
            "checking JSON Schemas needs the catalog extra: pip install 'outbox[catalog]'"
        ) from None


def check_example(schema: dict[str, Any] | None, example: Any) -> None:
    """Raise InvalidEventType naming the JSON path where ``example`` breaks ``schema``."""
    if example is not None:
        _storable("the example", example)
    if schema is None or example is None:
        return
    problem = catalog.compile_schema(schema)(example)
    if problem is not None:
        raise InvalidEventType(f"the example does not match the schema {problem}")


def _description(value: object) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise InvalidEventType("description must be a string")
    if len(value) > DESCRIPTION_MAX_LENGTH:
        raise InvalidEventType(
            f"description is {len(value)} characters, over {DESCRIPTION_MAX_LENGTH}")
    if "\x00" in value:
        raise InvalidEventType("description contains a NUL character")
    return value


def _tenants(value: object) -> list[str] | None:
    if value is None:
        return None
    if isinstance(value, str) or not isinstance(value, list | tuple):
        raise InvalidEventType("tenants must be a list of tenant ids (or None: every tenant)")
    for tenant in value:
        try:
            check_tenant(tenant)
        except InvalidEvent as exc:
            raise InvalidEventType(f"tenants: {exc}") from None
    return sorted(set(value))


def _params(name: str, description: object, schema: object, example: Any,
            tenants: object = None) -> dict[str, Any]:
    checked = None if schema is None else check_schema(schema)
    check_example(checked, example)
    return {"name": check_name(name), "description": _description(description),
            "json_schema": None if checked is None else json.dumps(checked),
            "example": None if example is None else json.dumps(example),
            "tenants": _tenants(tenants)}


def add(conn: psycopg.Connection[Any], name: str, *, schema: str,
        json_schema: dict[str, Any] | None = None, description: str | None = None,
        example: Any = None, tenants: list[str] | None = None) -> EventType:
    """Register a new type; EventTypeExists if ``name`` is already registered.
    ``tenants``: whom the portal offers it to (None: every tenant; []: none, internal)."""
    params = _params(name, description, json_schema, example, tenants)
    with translated(), conn.cursor(row_factory=_ROW) as cur:
        found = cur.execute(render(queries.TYPE_INSERT, schema), params).fetchone()
    if found is None:
        raise EventTypeExists(
            f"event type {name!r} is already registered: use update (or a new name, e.g. "
            f"{name}.v2, for a breaking change)")
    catalog.forget()
    return found


def put(conn: psycopg.Connection[Any], name: str, *, schema: str,
        json_schema: dict[str, Any] | None = None, description: str | None = None,
        example: Any = None) -> tuple[EventType, bool]:
    """Register or replace ``name``'s description, schema and example (the deprecated flag
    is kept); ``(entry, changed)``: unchanged content writes nothing and keeps the version."""
    params = _params(name, description, json_schema, example)
    with translated(), conn.cursor(row_factory=_ROW) as cur:
        found = cur.execute(render(queries.TYPE_UPSERT, schema), params).fetchone()
    if found is None:
        return get(conn, name, schema=schema), False
    catalog.forget()
    return found, True


def list_all(conn: psycopg.Connection[Any], *, schema: str) -> list[EventType]:
    """Every registered type, by name."""
    with translated(), conn.cursor(row_factory=_ROW) as cur:
        return cur.execute(render(queries.TYPE_LIST, schema)).fetchall()


def offered(conn: psycopg.Connection[Any], tenant: str, *, schema: str) -> list[EventType]:
    """The types the portal offers ``tenant``, by name."""
    with translated(), conn.cursor(row_factory=_ROW) as cur:
        return cur.execute(render(queries.TYPE_LIST_TENANT, schema), (tenant,)).fetchall()


def get_offered(conn: psycopg.Connection[Any], name: str, tenant: str, *,
                schema: str) -> EventType:
    """``name`` if the portal offers it to ``tenant``, else EventTypeNotFound (as if absent)."""
    found = get(conn, name, schema=schema)
    if not found.offered_to(tenant):
        raise EventTypeNotFound(f"no event type {name!r} in the catalog")
    return found


def check_subscribable(conn: psycopg.Connection[Any], tenant: str,
                       filters: list[str] | None, *, schema: str) -> None:
    """InvalidEndpoint if an exact filter of a ``tenant``'s endpoint names a registered type
    the portal does not offer that tenant (prefix patterns and unregistered types pass)."""
    if not filters:
        return
    names = {t.name: t for t in list_all(conn, schema=schema)}
    for name in filters:
        entry = names.get(name)
        if entry is not None and not entry.offered_to(tenant):
            raise InvalidEndpoint(f"event type {name!r} is not offered to this tenant")


def get(conn: psycopg.Connection[Any], name: str, *, schema: str) -> EventType:
    """The catalog's entry for ``name``; EventTypeNotFound if none (a malformed name:
    InvalidEventType)."""
    check_name(name)
    with translated(), conn.cursor(row_factory=_ROW) as cur:
        found = cur.execute(render(queries.TYPE_GET, schema), (name,)).fetchone()
    if found is None:
        raise EventTypeNotFound(f"no event type {name!r} in the catalog")
    return found


def update(conn: psycopg.Connection[Any], name: str, *, schema: str,
           json_schema: Any = _KEEP, description: Any = _KEEP, example: Any = _KEEP,
           deprecated: bool | None = None, tenants: Any = _KEEP) -> EventType:
    """Change the given fields (the others are kept; ``json_schema=None`` drops the schema,
    ``example=None`` the example). The example is checked against the resulting schema."""
    check_name(name)
    with translated(), conn.cursor(row_factory=_ROW) as cur:
        old = cur.execute(render(queries.TYPE_GET_FOR_UPDATE, schema), (name,)).fetchone()
        if old is None:
            raise EventTypeNotFound(f"no event type {name!r} in the catalog")
        params = _params(name, old.description if description is _KEEP else description,
                         old.json_schema if json_schema is _KEEP else json_schema,
                         old.example if example is _KEEP else example,
                         old.tenants if tenants is _KEEP else tenants)
        params["deprecated"] = old.deprecated if deprecated is None else bool(deprecated)
        found = cur.execute(render(queries.TYPE_UPDATE, schema), params).fetchone()
    catalog.forget()
    assert found is not None
    return found


def deprecate(conn: psycopg.Connection[Any], name: str, *, schema: str,
              deprecated: bool = True) -> EventType:
    """Mark ``name`` deprecated (or not): emitting it still works, with a warning in the
    log; exports and the portal show it as deprecated."""
    return update(conn, name, schema=schema, deprecated=deprecated)


def remove(conn: psycopg.Connection[Any], name: str, *, schema: str) -> None:
    """Drop ``name`` from the catalog: its events are no longer checked (nor, under
    ``OUTBOX_REQUIRE_REGISTERED_TYPES=true``, accepted). Events already stored stay."""
    check_name(name)
    with translated(), conn.cursor() as cur:
        cur.execute(render(queries.TYPE_DELETE, schema), (name,))
        if cur.fetchone() is None:
            raise EventTypeNotFound(f"no event type {name!r} in the catalog")
    catalog.forget()
