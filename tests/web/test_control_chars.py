"""A NUL (which PostgreSQL refuses in text: a 500 if it reached the driver) in any string
the API takes, read from the app's own OpenAPI document so a field or route added later
is covered too: every query and path parameter, every string field of every JSON body
(in lists and header maps too). Each is a 4xx, never a 500, and changes nothing."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from fastapi import FastAPI

from outbox.admin.portal import WebSettings
from tests.web.conftest import World, enter_portal, new_client, snapshot

NUL = "a\x00b"


def _resolve(spec: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[1]
        return _resolve(spec, spec["components"]["schemas"][name])
    options = [_resolve(spec, s) for s in schema.get("anyOf", []) if s.get("type") != "null"]
    return options[0] if options else schema


def _valid(name: str, world: World) -> Any:
    """A valid value for a required field, so the NUL is what the route refuses."""
    return {"url": "http://127.0.0.1:9/nul", "tenant": "acme",
            "ids": [world.a.dead[0]]}.get(name, "x")


def _bodies(spec: dict[str, Any], schema: dict[str, Any], world: World
            ) -> Iterator[tuple[str, dict[str, Any]]]:
    model = _resolve(spec, schema)
    base = {name: _valid(name, world) for name in model.get("required", [])}
    for name, prop in model.get("properties", {}).items():
        field = _resolve(spec, prop)
        kind = field.get("type")
        if kind == "string":
            yield name, {**base, name: NUL}
        elif kind == "array" and _resolve(spec, field.get("items", {})).get("type") == "string":
            yield name, {**base, name: [NUL]}
        elif kind == "object":
            yield name + " value", {**base, name: {"X-Nul": NUL}}
            yield name + " key", {**base, name: {NUL: "v"}}


def _requests(app: FastAPI, world: World) -> Iterator[tuple[str, str, dict[str, Any]]]:
    spec = app.openapi()
    ids = {"endpoint_id": str(world.a.endpoint), "event_id": str(world.a.events[0]),
           "delivery_id": str(world.a.dead[0])}
    for template, operations in spec["paths"].items():
        for method, op in operations.items():
            path = template
            params = op.get("parameters", [])
            for p in params:
                if p["in"] == "path":
                    path = path.replace("{" + p["name"] + "}", ids.get(p["name"], "x"))
            for p in params:
                if p["in"] == "path":
                    yield method, template.replace("{" + p["name"] + "}", "%00"), {}
                elif p["in"] == "query" and _resolve(spec, p["schema"]).get("type") == "string":
                    yield method, path, {"params": {p["name"]: NUL}}
            body = op.get("requestBody", {}).get("content", {}).get("application/json")
            if body:
                for _, json in _bodies(spec, body["schema"], world):
                    yield method, path, {"json": json}


def test_a_nul_anywhere_is_a_4xx(db_url: str, app: FastAPI, web_settings: WebSettings,
                                 world: World) -> None:
    before = snapshot(db_url)
    sent = 0
    with new_client(app) as operator, new_client(app) as portal:
        operator.headers["Authorization"] = "Bearer " + (
            web_settings.admin_token.get_secret_value())
        portal.headers["X-CSRF-Token"] = enter_portal(portal, web_settings, "acme")
        for method, path, kwargs in _requests(app, world):
            client = portal if path.startswith("/api/portal/") else operator
            answer = client.request(method.upper(), path, **kwargs)
            sent += 1
            assert 400 <= answer.status_code < 500, (method, path, kwargs, answer.text)
            assert answer.json()["error"]["code"], answer.text
    assert snapshot(db_url) == before
    assert sent > 60, sent  # the walk found the routes, their parameters and bodies
