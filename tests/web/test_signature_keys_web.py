"""Ed25519 endpoints over HTTP: the API and portal field ``signature``, the public keys
served to the operator, to the tenant's portal session (its own endpoints only) and to a
receiver without credentials; the secret key in no answer."""

from __future__ import annotations

import re

from fastapi import FastAPI
from fastapi.testclient import TestClient

from outbox.admin.portal import WebSettings
from tests.support.cli import execute
from tests.support.pg import SCHEMA
from tests.web.conftest import BASE, World, enter_portal, new_client, snapshot

WHSK = re.compile(r"whsk_")
# The routes this file exercises (tests/web/test_api.py keeps the list of every route whole)
KEYS_COVERED = {("GET", "/api/public-keys/{endpoint_id}"),
                ("GET", "/api/endpoints/{endpoint_id}/public-keys"),
                ("GET", "/api/portal/endpoints/{endpoint_id}/public-keys")}


def test_api_creates_an_ed25519_endpoint_and_serves_its_keys(api: TestClient, anon: TestClient
                                                             ) -> None:
    created = api.post("/api/endpoints", json={"url": BASE + "ed", "signature": "ed25519"})
    assert created.status_code == 201, created.text
    body = created.json()
    endpoint, key = body["endpoint"], body["endpoint"]["public_key"]
    assert body["secret"] is None and endpoint["signature"] == "ed25519"
    assert key.startswith("whpk_") and not WHSK.search(created.text)
    keys = {"endpoint_id": endpoint["id"], "signature": "ed25519",
            "keys": [{"public_key": key, "expires_at": None}]}
    assert api.get(f"/api/endpoints/{endpoint['id']}/public-keys").json() == keys
    assert anon.get(f"/api/public-keys/{endpoint['id']}").json() == keys  # no credentials

    rotated = api.post(f"/api/endpoints/{endpoint['id']}/rotate-secret", json={"grace": "1h"})
    assert rotated.status_code == 200 and rotated.json()["secret"] is None
    assert not WHSK.search(rotated.text)
    new = rotated.json()["endpoint"]
    assert new["previous_public_key"] == key and new["public_key"] != key
    served = anon.get(f"/api/public-keys/{endpoint['id']}").json()["keys"]
    assert [k["public_key"] for k in served] == [new["public_key"], key]
    assert served[0]["expires_at"] is None
    assert served[1]["expires_at"] == new["previous_secret_expires_at"]


def test_hmac_and_unknown_endpoints_look_alike_to_an_anonymous_caller(
        api: TestClient, anon: TestClient) -> None:
    hmac_id = api.post("/api/endpoints", json={"url": BASE + "h"}).json()["endpoint"]["id"]
    assert api.get(f"/api/endpoints/{hmac_id}/public-keys").json() == {
        "endpoint_id": hmac_id, "signature": "hmac", "keys": []}
    absent = "01a208a6-19f0-706a-8093-b40be3f4ee27"
    answers = [anon.get(f"/api/public-keys/{eid}") for eid in (hmac_id, absent)]
    assert [a.status_code for a in answers] == [404, 404]
    assert answers[0].text.replace(hmac_id, "ID") == answers[1].text.replace(absent, "ID")
    assert anon.get("/api/public-keys/not-an-id").status_code == 404
    assert "secret" not in answers[0].text and BASE not in answers[0].text


def test_bad_signature_values_are_refused_and_write_nothing(
        db_url: str, api: TestClient, app: FastAPI, web_settings: WebSettings,
        world: World) -> None:
    before = snapshot(db_url)
    for value in ("rsa", "", "ED25519", None, 1):
        answer = api.post("/api/endpoints", json={"url": BASE + "x", "signature": value})
        assert answer.status_code == 422, (value, answer.text)
    answer = api.post("/api/endpoints", json={"url": BASE + "x", "signature": "ed25519",
                                              "secret": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2La"})
    assert answer.status_code == 422 and "whsk_ Ed25519 secret key" in answer.text
    with new_client(app) as client:
        csrf = enter_portal(client, web_settings, "acme")
        page = client.post("/portal/endpoints", data={"url": BASE + "p", "signature": "rsa",
                                                      "csrf_token": csrf})
        assert page.status_code == 400 and "signature must be one of" in page.text
    assert snapshot(db_url) == before


def test_portal_offers_ed25519_and_scopes_the_keys_to_the_tenant(
        db_url: str, app: FastAPI, web_settings: WebSettings, world: World,
        api: TestClient) -> None:
    other = api.post("/api/endpoints", json={"url": BASE + "g", "tenant": "globex",
                                             "signature": "ed25519"}).json()["endpoint"]["id"]
    with new_client(app) as client:
        csrf = enter_portal(client, web_settings, "acme")
        created = client.post("/api/portal/endpoints", headers={"X-CSRF-Token": csrf},
                              json={"url": BASE + "acme-ed", "signature": "ed25519"})
        assert created.status_code == 201 and created.json()["secret"] is None
        eid, key = created.json()["endpoint"]["id"], created.json()["endpoint"]["public_key"]
        own = client.get(f"/api/portal/endpoints/{eid}/public-keys")
        assert own.json()["keys"] == [{"public_key": key, "expires_at": None}]
        assert client.get(f"/api/portal/endpoints/{other}/public-keys").status_code == 404
        assert client.get(f"/api/portal/endpoints/{world.everyone}/public-keys"
                          ).status_code == 404
        page = client.post("/portal/endpoints", data={
            "url": BASE + "acme-page", "signature": "ed25519", "csrf_token": csrf})
        assert page.status_code == 200 and "Your public key" in page.text
        assert "whpk_" in page.text and not WHSK.search(page.text)
        assert "Your signing secret" not in page.text
        ((page_key,),) = execute(db_url, f"SELECT public_key FROM {SCHEMA}.endpoints WHERE"
                                         f" url = %s", (BASE + "acme-page",))
        assert page_key in page.text
        edit = client.get(f"/portal/endpoints/{eid}")
        assert key in edit.text and "Rotate key" in edit.text
        rotated = client.post(f"/portal/endpoints/{eid}/rotate",
                              data={"grace": "24", "csrf_token": csrf})
        assert rotated.status_code == 200 and "Key rotated" in rotated.text
        assert key in rotated.text and not WHSK.search(rotated.text)


def test_the_console_shows_the_scheme_and_public_key(api: TestClient,
                                                     operator: tuple[TestClient, str]) -> None:
    created = api.post("/api/endpoints", json={"url": BASE + "ed", "signature": "ed25519"})
    key = created.json()["endpoint"]["public_key"]
    client, _ = operator
    page = client.get("/endpoints")
    assert page.status_code == 200 and key in page.text and "ed25519 (v1a)" in page.text
    assert not WHSK.search(page.text)
