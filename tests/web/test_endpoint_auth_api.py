"""Endpoint credentials in the JSON API and the portal API: write-only fields of the same
names as the CLI's, refusals that write nothing and quote no value, a tenant setting them
on its own endpoints only."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.testclient import TestClient

from outbox.admin.portal import WebSettings
from tests.web.conftest import World, enter_portal, login, new_client, snapshot

TOKEN = "api-token-31337-xyz"
KEY = "api-key-271828-abc"


def test_create_and_patch_show_names_and_kind_only(api: TestClient) -> None:
    made = api.post("/api/endpoints", json={
        "url": "http://127.0.0.1:9/a", "headers": {"X-Team": "ops"},
        "secret_headers": {"X-Api-Key": KEY}, "bearer_token": TOKEN})
    assert made.status_code == 201, made.text
    endpoint = made.json()["endpoint"]
    assert (endpoint["secret_headers"], endpoint["auth_kind"]) == (["X-Api-Key"], "bearer")
    assert endpoint["tls_client_cert_subject"] is None
    eid = endpoint["id"]
    cleared = api.patch(f"/api/endpoints/{eid}", json={"clear_auth": True,
                                                       "clear_secret_headers": True})
    assert cleared.status_code == 200, cleared.text
    assert (cleared.json()["endpoint"]["auth_kind"],
            cleared.json()["endpoint"]["secret_headers"]) == (None, [])
    for answer in (made.text, cleared.text, api.get(f"/api/endpoints/{eid}").text):
        assert TOKEN not in answer and KEY not in answer


BAD: list[tuple[dict[str, Any], str]] = [
    ({"secret_headers": {"Host": KEY}}, "is set by outbox"),
    ({"secret_headers": {"X-Team": KEY}, "headers": {"x-team": "ops"}}, "both a plain"),
    ({"basic_auth": "u:" + TOKEN, "bearer_token": TOKEN}, "not both"),
    ({"bearer_token": "has space " + TOKEN}, "visible ASCII"),
    ({"basic_auth": TOKEN}, "USER:PASSWORD"),
    ({"tls_client_cert": "-----BEGIN CERTIFICATE-----\n" + TOKEN}, "together"),
    ({"bearer_token": TOKEN, "headers": {"Authorization": "x"}}, "bearer auth"),
    ({"bearer_token": 5}, "bearer_token"),
]


def test_bad_credentials_are_422_and_write_nothing(db_url: str, api: TestClient) -> None:
    before = snapshot(db_url)
    for extra, message in BAD:
        answer = api.post("/api/endpoints", json={"url": "https://127.0.0.1:9/b", **extra})
        assert answer.status_code == 422, (extra, answer.text)
        assert answer.json()["error"]["code"] == "invalid_endpoint", answer.text
        assert message in answer.json()["error"]["message"], answer.text
        assert TOKEN not in answer.text and KEY not in answer.text
    assert snapshot(db_url) == before


def test_a_tenant_sets_credentials_on_its_own_endpoints_only(
        db_url: str, app: FastAPI, web_settings: WebSettings, world: World) -> None:
    with new_client(app) as client:
        h = {"X-CSRF-Token": enter_portal(client, web_settings, "acme")}
        made = client.post("/api/portal/endpoints", headers=h, json={
            "url": "http://127.0.0.1:9/acme-auth", "basic_auth": "acme:" + TOKEN,
            "secret_headers": {"X-Api-Key": KEY}})
        assert made.status_code == 201, made.text
        assert made.json()["endpoint"]["auth_kind"] == "basic"
        assert TOKEN not in made.text and KEY not in made.text
        before = snapshot(db_url)
        theirs = client.patch(f"/api/portal/endpoints/{world.b.endpoint}", headers=h,
                              json={"bearer_token": TOKEN})
        assert theirs.status_code == 404
        assert snapshot(db_url) == before
        mine = client.patch(f"/api/portal/endpoints/{world.a.endpoint}", headers=h,
                            json={"bearer_token": TOKEN})
        assert mine.json()["endpoint"]["auth_kind"] == "bearer"


def test_the_contract_marks_the_credentials_write_only(api: TestClient) -> None:
    schemas = api.get("/api/openapi.json").json()["components"]["schemas"]
    for model in ("EndpointIn", "EndpointPatch", "PortalEndpointIn", "PortalEndpointPatch"):
        props = schemas[model]["properties"]
        for name in ("secret_headers", "basic_auth", "bearer_token", "tls_client_cert",
                     "tls_client_key"):
            assert props[name].get("writeOnly") is True, (model, name)


def test_console_and_portal_pages_show_names_and_kinds_only(
        app: FastAPI, api: TestClient, web_settings: WebSettings, world: World) -> None:
    with new_client(app) as client:
        h = {"X-CSRF-Token": enter_portal(client, web_settings, "acme")}
        set_ = client.patch(f"/api/portal/endpoints/{world.a.endpoint}", headers=h,
                            json={"bearer_token": TOKEN, "secret_headers": {"X-Api-Key": KEY}})
        assert set_.status_code == 200, set_.text
        portal = client.get("/portal/")
    with new_client(app) as console:
        login(console)
        page = console.get("/endpoints")
    for answer in (portal, page):
        assert answer.status_code == 200
        assert "auth: bearer · secret headers: X-Api-Key" in answer.text
        assert TOKEN not in answer.text and KEY not in answer.text
