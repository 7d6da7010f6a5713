"""The event catalog as documents for receivers: OpenAPI 3.1 (a ``webhooks`` entry per
type), AsyncAPI 3.0, or a JSON Schema (draft 2020-12) bundle. Pure functions of the
catalog's entries: no SQL, nothing written.

Each webhook is what a receiver gets: a POST whose body is the event's payload (the exact
JSON emitted) and whose Standard Webhooks headers sign it. Each type's schema becomes one
named schema (``invoice.paid.v2`` -> ``InvoicePaidV2``); its own ``$defs`` become named
schemas beside it (``InvoicePaidV2_Line``) and its references are rewritten to them, so
the documents hold no reference that only resolved inside the original schema.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from outbox.admin.types import EventType
from outbox.errors import InvalidEventType

__all__ = ["FORMATS", "HEADERS", "asyncapi", "component_names", "export", "jsonschema_bundle",
           "openapi"]

FORMATS = ("openapi", "asyncapi", "jsonschema")
DRAFT = "https://json-schema.org/draft/2020-12/schema"

#: The Standard Webhooks headers every delivery carries: (name, description, schema).
HEADERS: tuple[tuple[str, str, dict[str, Any]], ...] = (
    ("webhook-id", "The event's id: the same on every retry and replay; dedupe on it.",
     {"type": "string"}),
    ("webhook-timestamp", "Unix seconds when this attempt was signed; refuse old ones.",
     {"type": "string", "pattern": "^[0-9]+$"}),
    ("webhook-signature", "Space-separated v1,<base64 HMAC-SHA256> of "
     "'{webhook-id}.{webhook-timestamp}.{body}' under each current secret.",
     {"type": "string"}),
)


def component_names(types: Sequence[EventType]) -> dict[str, str]:
    """Event type name -> a schema name fit for code generators (PascalCase, unique)."""
    names: dict[str, str] = {}
    used: set[str] = set()
    for t in types:
        base = "".join(p[:1].upper() + p[1:] for p in re.split(r"[^A-Za-z0-9]+", t.name) if p)
        base = base if base[:1].isalpha() else f"Event{base}"
        name, n = base, 2
        while name in used:
            name, n = f"{base}{n}", n + 1
        used.add(name)
        names[t.name] = name
    return names


def _rewrite(node: Any, name: str, base: str) -> Any:
    """``node`` with its local references pointed at the hoisted schemas under ``base``."""
    if isinstance(node, list):
        return [_rewrite(v, name, base) for v in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "$ref" and isinstance(value, str) and value.startswith("#"):
            pointer = value[1:]
            if pointer.startswith("/$defs/"):
                head, _, rest = pointer[len("/$defs/"):].partition("/")
                out[key] = f"{base}{name}_{head}" + (f"/{rest}" if rest else "")
            else:
                out[key] = f"{base}{name}{pointer}"
        else:
            out[key] = _rewrite(value, name, base)
    return out


def _hoisted(types: Sequence[EventType], base: str) -> tuple[dict[str, str], dict[str, Any]]:
    """(type name -> schema name, schema name -> schema) with references under ``base``."""
    names = component_names(types)
    schemas: dict[str, Any] = {}
    for t in types:
        name = names[t.name]
        schema = dict(t.json_schema) if t.json_schema is not None else {}
        schema.pop("$schema", None)
        defs = schema.pop("$defs", {})
        if not isinstance(defs, dict):
            raise InvalidEventType(f"{t.name}: $defs is not an object")
        schemas[name] = _rewrite(schema, name, base)
        if t.deprecated:
            schemas[name]["deprecated"] = True
        for def_name, sub in defs.items():
            schemas[f"{name}_{def_name}"] = _rewrite(sub, name, base)
    return names, schemas


def _summary(t: EventType) -> str:
    return (t.description.strip().splitlines() or [f"The {t.name} event"])[0]


def _info(title: str, version: str) -> dict[str, Any]:
    return {"title": title, "version": version,
            "description": "Events delivered as signed webhooks (Standard Webhooks): an HTTP "
                           "POST whose JSON body is the event's payload. Answer 2xx to "
                           "acknowledge; anything else is retried."}


def openapi(types: Sequence[EventType], *, title: str = "Webhooks",
            version: str = "1.0.0") -> dict[str, Any]:
    """OpenAPI 3.1: one ``webhooks`` operation per type, the payload schema as the request
    body, the Standard Webhooks headers as parameters."""
    names, schemas = _hoisted(types, "#/components/schemas/")
    params = {h: {"name": h, "in": "header", "required": True, "description": d, "schema": s}
              for h, d, s in HEADERS}
    webhooks: dict[str, Any] = {}
    for t in types:
        media: dict[str, Any] = {"schema": {"$ref": f"#/components/schemas/{names[t.name]}"}}
        if t.example is not None:
            media["example"] = t.example
        webhooks[t.name] = {"post": {
            "operationId": names[t.name], "summary": _summary(t),
            "description": t.description or _summary(t), "deprecated": t.deprecated,
            "parameters": [{"$ref": f"#/components/parameters/{h}"} for h in params],
            "requestBody": {"required": True, "content": {"application/json": media}},
            "responses": {"2XX": {"description": "Delivered: any 2xx acknowledges it."},
                          "default": {"description": "Not delivered: retried later."}},
        }}
    return {"openapi": "3.1.0", "info": _info(title, version), "jsonSchemaDialect": DRAFT,
            "webhooks": webhooks,
            "components": {"schemas": schemas, "parameters": params}}


def asyncapi(types: Sequence[EventType], *, title: str = "Webhooks",
             version: str = "1.0.0") -> dict[str, Any]:
    """AsyncAPI 3.0: one HTTP channel, one message per type, sent by this application."""
    names, schemas = _hoisted(types, "#/components/schemas/")
    headers = {"type": "object", "required": [h for h, _, _ in HEADERS],
               "properties": {h: {**s, "description": d} for h, d, s in HEADERS}}
    messages: dict[str, Any] = {}
    for t in types:
        message: dict[str, Any] = {
            "name": t.name, "title": t.name, "summary": _summary(t),
            "contentType": "application/json",
            "headers": {"$ref": "#/components/schemas/WebhookHeaders"},
            "payload": {"$ref": f"#/components/schemas/{names[t.name]}"}}
        if t.description:
            message["description"] = t.description
        if t.example is not None:
            message["examples"] = [{"name": "example", "payload": t.example}]
        messages[names[t.name]] = message
    refs = [{"$ref": f"#/channels/webhooks/messages/{m}"} for m in messages]
    return {
        "asyncapi": "3.0.0", "info": _info(title, version),
        "defaultContentType": "application/json",
        "channels": {"webhooks": {
            "address": None, "description": "Your endpoint's URL, as registered.",
            "messages": {m: {"$ref": f"#/components/messages/{m}"} for m in messages}}},
        "operations": {"sendWebhook": {
            "action": "send", "channel": {"$ref": "#/channels/webhooks"},
            "summary": "POST one event to a subscribed endpoint.", "messages": refs,
            "bindings": {"http": {"method": "POST"}}}},
        "components": {"schemas": {**schemas, "WebhookHeaders": headers},
                       "messages": messages},
    }


def jsonschema_bundle(types: Sequence[EventType], *, title: str = "Webhooks",
                      version: str = "1.0.0") -> dict[str, Any]:
    """One draft 2020-12 document: every type's schema under ``$defs``, and the event
    type -> schema map under ``x-event-types``; the document itself matches any payload of
    a registered type (``anyOf`` of them)."""
    names, schemas = _hoisted(types, "#/$defs/")
    return {"$schema": DRAFT, "title": title, "description": f"{title} {version}",
            "anyOf": [{"$ref": f"#/$defs/{names[t.name]}"} for t in types],
            "x-event-types": {t.name: {"$ref": f"#/$defs/{names[t.name]}",
                                       "deprecated": t.deprecated} for t in types},
            "$defs": schemas}


def export(types: Sequence[EventType], fmt: str, *, title: str = "Webhooks",
           version: str = "1.0.0") -> dict[str, Any]:
    """The document of format ``fmt`` (one of :data:`FORMATS`)."""
    makers = {"openapi": openapi, "asyncapi": asyncapi, "jsonschema": jsonschema_bundle}
    if fmt not in makers:
        raise InvalidEventType(f"unknown export format {fmt!r}: use one of {', '.join(FORMATS)}")
    return makers[fmt](types, title=title, version=version)
