"""The OpenAPI document is the contract the server keeps: security schemes on every
operation, every status an operation answers is declared with the one error body, the
parameters' formats as the server checks them, and a 405's Allow lists every method of
the path."""

from __future__ import annotations

import json
import uuid
from typing import Any

from fastapi import FastAPI
from fastapi.testclient import TestClient

from outbox.admin.portal import WebSettings
from outbox.web.app import PUBLIC_PATHS
from tests.web.conftest import TOKEN, World, enter_portal, new_client

NOWHERE = str(uuid.UUID(int=7))
UNSAFE = {"post", "put", "patch", "delete"}


def _operations(app: FastAPI) -> list[tuple[str, str, dict[str, Any]]]:
    spec = app.openapi()
    return [(m, p, op) for p, ops in spec["paths"].items() for m, op in ops.items()]


def test_the_document_declares_security_and_errors(app: FastAPI) -> None:
    spec = app.openapi()
    assert set(spec["components"]["securitySchemes"]) == {
        "operatorBearer", "operatorCookie", "portalCookie", "csrfHeader"}
    operations = _operations(app)
    assert len(operations) >= 26
    for method, path, op in operations:
        declared = set(op["responses"])
        if path in PUBLIC_PATHS:  # the public keys, for receivers: no credentials at all
            assert op["security"] == [] and "401" not in declared, (method, path)
            assert {"404", "422", "503"} <= declared, (method, path)
        else:
            assert op["security"], (method, path)
            assert {"401", "422", "503"} <= declared, (method, path)
        if method in UNSAFE:
            assert "403" in declared, (method, path)
        for status in {s for s in declared if not s.startswith("2")}:  # 204: no body
            schema = op["responses"][status]["content"]["application/json"]["schema"]
            assert schema == {"$ref": "#/components/schemas/Error"}, (method, path, status)
        for param in op.get("parameters", []):
            if param["name"] in ("after", "endpoint", "endpoint_id", "event_id"):
                assert param["schema"]["format"] == "uuid", (method, path, param)


def _fill(path: str, value: str) -> str:
    return path.replace("{endpoint_id}", value).replace("{event_id}", value)


def _declared(op: dict[str, Any], answer: Any, what: str) -> None:
    assert str(answer.status_code) in op["responses"], (what, answer.status_code, answer.text)
    if answer.status_code >= 400:
        body = answer.json()
        assert set(body) == {"error"} and set(body["error"]) == {"code", "message"}, what


def test_every_answer_is_declared(app: FastAPI, world: World,
                                  web_settings: WebSettings) -> None:
    with new_client(app) as anon, new_client(app) as operator, new_client(app) as portal:
        operator.headers["Authorization"] = f"Bearer {TOKEN}"
        portal.headers["X-CSRF-Token"] = enter_portal(portal, web_settings, "acme")
        for method, template, op in _operations(app):
            client = portal if template.startswith("/api/portal/") else operator
            path = _fill(template, NOWHERE)
            what = f"{method.upper()} {template}"
            _declared(op, anon.request(method, path, json={}), what + " anonymous")
            _declared(op, client.request(method, path, json={}), what + " empty body")
            _declared(op, client.request(method, _fill(template, "zz"), json={}), what + " zz")
            for param in op.get("parameters", []):
                if param["in"] == "query":
                    bad = client.request(method, path, params={param["name"]: "zz"}, json={})
                    _declared(op, bad, f"{what} ?{param['name']}=zz")
            if "requestBody" in op:
                broken = client.request(method, path, content=b"{not json",
                                        headers={"Content-Type": "application/json"})
                _declared(op, broken, what + " broken JSON")
                huge = client.request(method, path, content=json.dumps(
                    {"description": "x" * (web_settings.max_body_bytes + 1)}).encode(),
                    headers={"Content-Type": "application/json"})
                _declared(op, huge, what + " too large")


def test_allow_lists_every_method_of_the_path(app: FastAPI, api: TestClient) -> None:
    methods: dict[str, set[str]] = {}
    for method, path, _ in _operations(app):
        methods.setdefault(path, set()).add(method.upper())
    assert any(len(m) > 1 for m in methods.values())
    for template, expected in methods.items():
        path = _fill(template, NOWHERE)
        for method in ("OPTIONS", "PUT", "DELETE"):
            if method in expected:
                continue
            answer = api.request(method, path)
            assert answer.status_code == 405, (method, path)
            allowed = {m.strip() for m in answer.headers["allow"].split(",")}
            assert allowed == expected, (method, path, allowed)


def test_delivery_ids_past_bigint_are_a_422_not_a_500(db_url: str, app: FastAPI,
                                                      world: World,
                                                      web_settings: WebSettings) -> None:
    """Found by fuzzing: an id PostgreSQL's bigint cannot hold made replay and skip a 500."""
    huge = [2**63, 1]
    with new_client(app) as operator, new_client(app) as portal:
        operator.headers["Authorization"] = f"Bearer {TOKEN}"
        portal.headers["X-CSRF-Token"] = enter_portal(portal, web_settings, "acme")
        for client, path, body in (
                (operator, "/api/dead/replay", {"ids": huge, "confirm": True}),
                (operator, "/api/dead/skip", {"ids": huge}),
                (portal, "/api/portal/replay", {"ids": huge, "confirm": True}),
                (portal, "/api/portal/skip", {"ids": huge})):
            answer = client.post(path, json=body)
            assert answer.status_code == 422, (path, answer.text)
            assert answer.json()["error"]["code"] == "invalid_parameter", path
