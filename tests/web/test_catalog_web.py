"""The event catalog over HTTP: the operator's API routes and console pages, the portal's
catalog (only the types its tenant is offered) and its endpoint form, on a real database."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from openapi_spec_validator import validate

from outbox.admin.portal import WebSettings
from tests.support.cli import execute
from tests.web.conftest import BASE, World, enter_portal, new_client

# The event catalog's API routes, all exercised here (tests/web/test_api.py checks that
# every API route is exercised by its own list or this one).
CATALOG_COVERED = {
    ("GET", "/api/types"), ("POST", "/api/types"), ("GET", "/api/types/{name:path}"),
    ("PATCH", "/api/types/{name:path}"), ("DELETE", "/api/types/{name:path}"),
    ("GET", "/api/types-export"), ("GET", "/api/portal/types"),
    ("GET", "/api/portal/types/{name:path}"),
}
SCHEMA_OBJ = {"type": "object", "properties": {"amount": {"type": "integer"}},
              "required": ["amount"]}


def names(answer: Any) -> list[str]:
    assert answer.status_code == 200, answer.text
    return [t["name"] for t in answer.json()["types"]]


def test_operator_api_register_update_deprecate_remove(api: TestClient) -> None:
    made = api.post("/api/types", json={"name": "invoice.paid", "schema": SCHEMA_OBJ,
                                        "description": "Paid", "example": {"amount": 1}})
    assert made.status_code == 201, made.text
    assert made.json()["type"]["schema"] == SCHEMA_OBJ
    assert names(api.get("/api/types")) == ["invoice.paid"]
    assert api.get("/api/types/invoice.paid").json()["type"]["example"] == {"amount": 1}
    changed = api.patch("/api/types/invoice.paid", json={"deprecated": True,
                                                         "description": "Old"})
    assert (changed.json()["type"]["deprecated"], changed.json()["type"]["description"],
            changed.json()["type"]["schema"]) == (True, "Old", SCHEMA_OBJ)
    dropped = api.patch("/api/types/invoice.paid", json={"schema": None})
    assert dropped.json()["type"]["schema"] is None
    doc = api.get("/api/types-export", params={"format": "openapi"}).json()
    validate(doc)
    assert doc["webhooks"]["invoice.paid"]["post"]["deprecated"] is True
    assert api.get("/api/types-export", params={"format": "asyncapi"}).json()[
        "asyncapi"] == "3.0.0"
    assert api.delete("/api/types/invoice.paid").status_code == 204
    assert names(api.get("/api/types")) == []


@pytest.mark.parametrize(("method", "path", "body", "status", "code"), [
    ("POST", "/api/types", {"name": "bad name"}, 422, "invalid_request"),
    ("POST", "/api/types", {"name": "a", "schema": {"type": 3}}, 422, "invalid_event_type"),
    ("POST", "/api/types", {"name": "a", "schema": SCHEMA_OBJ, "example": {}}, 422,
     "invalid_event_type"),
    ("POST", "/api/types", {"name": "a", "schmea": {}}, 422, "invalid_request"),
    ("POST", "/api/types", {"name": "a", "tenants": [""]}, 422, "invalid_event_type"),
    ("GET", "/api/types/nope", None, 404, "event_type_not_found"),
    ("PATCH", "/api/types/nope", {"deprecated": True}, 404, "event_type_not_found"),
    ("DELETE", "/api/types/nope", None, 404, "event_type_not_found"),
    ("GET", "/api/types-export?format=word", None, 422, "invalid_request"),
])
def test_operator_api_bad_input(db_url: str, api: TestClient, method: str, path: str,
                                body: Any, status: int, code: str) -> None:
    answer = api.request(method, path, json=body)
    assert (answer.status_code, answer.json()["error"]["code"]) == (status, code), answer.text
    assert execute(db_url, "SELECT count(*) FROM outbox.event_types") == [(0,)]


def test_portal_sees_only_its_offered_types(app: FastAPI, web_settings: WebSettings,
                                            world: World) -> None:
    for tenant, expected in (("acme", ["invoice.paid"]),
                             ("globex", ["globex.private", "invoice.paid"])):
        with new_client(app) as client:
            enter_portal(client, web_settings, tenant)
            assert names(client.get("/api/portal/types")) == expected
            one = client.get("/api/portal/types/invoice.paid").json()["type"]
            assert one["example"] == {"n": 1, "who": "acme"} and "tenants" not in one
            page = client.get("/portal/catalog")
            assert "invoice.paid" in page.text and "ops.internal" not in page.text
            detail = client.get("/portal/catalog/invoice.paid")
            assert "&#34;who&#34;" in detail.text and "An invoice was paid" in detail.text
            assert client.get("/portal/catalog/ops.internal").status_code == 404
            assert client.get("/api/portal/types/ops.internal").status_code == 404
            home = client.get("/portal")
            assert '<option value="invoice.paid">' in home.text
            assert ('<option value="globex.private">' in home.text) == (tenant == "globex")


def test_portal_cannot_subscribe_to_a_type_it_is_not_offered(
        db_url: str, app: FastAPI, web_settings: WebSettings, world: World) -> None:
    before = execute(db_url, "SELECT count(*) FROM outbox.endpoints")
    with new_client(app) as client:
        csrf = enter_portal(client, web_settings, "acme")
        refused = client.post("/api/portal/endpoints", headers={"X-CSRF-Token": csrf},
                              json={"url": BASE + "x", "event_types": ["globex.private"]})
        assert refused.status_code == 422 and "not offered" in refused.text
        page = client.post("/portal/endpoints", data={
            "url": BASE + "x", "event_types": "ops.internal", "csrf_token": csrf})
        assert page.status_code == 400 and "not offered" in page.text
        patched = client.patch(f"/api/portal/endpoints/{world.a.endpoint}",
                               headers={"X-CSRF-Token": csrf},
                               json={"event_types": ["ops.internal"]})
        assert patched.status_code == 422
        assert execute(db_url, "SELECT count(*) FROM outbox.endpoints") == before
        ok = client.post("/api/portal/endpoints", headers={"X-CSRF-Token": csrf},
                         json={"url": BASE + "y", "event_types": ["invoice.paid", "x.*"]})
        assert ok.status_code == 201, ok.text


def test_console_pages(db_url: str, operator: tuple[TestClient, str]) -> None:
    client, csrf = operator
    assert "No event type is registered" in client.get("/types").text
    bad = client.post("/types", data={"name": "a.b", "json_schema": "{nope",
                                      "csrf_token": csrf})
    assert bad.status_code == 400 and "schema is not JSON" in bad.text
    made = client.post("/types", data={"name": "a.b", "description": "An A",
                                       "json_schema": '{"type": "object"}',
                                       "example": '{"x": 1}', "csrf_token": csrf})
    assert made.status_code == 303
    assert "a.b" in client.get("/types").text
    page = client.get("/types/a.b")
    assert "An A" in page.text and "every tenant" in page.text
    for action, seen in (("deprecate", "deprecated"), ("undeprecate", "current")):
        done = client.post("/types/a.b", data={"action": action, "csrf_token": csrf})
        assert done.status_code == 303 and done.headers["location"].endswith(f"done={seen}")
    saved = client.post("/types/a.b", data={"action": "save", "description": "Changed",
                                            "json_schema": "", "example": "",
                                            "csrf_token": csrf})
    assert saved.status_code == 303
    assert execute(db_url, "SELECT description, json_schema FROM outbox.event_types") == [
        ("Changed", None)]
    refused = client.post("/types/a.b", data={"action": "save", "json_schema": '{"type": 1}',
                                              "csrf_token": csrf})
    assert refused.status_code == 400
    assert client.post("/types/a.b", data={"action": "remove"}).status_code == 403  # no CSRF
    assert client.post("/types/a.b", data={"action": "remove",
                                           "csrf_token": csrf}).status_code == 303
    assert client.get("/types/a.b").status_code == 404
