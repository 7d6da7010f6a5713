"""OAuth2 client credentials through the API, the portal (JSON and pages) and the console:
the fields of the same names as the CLI's options, bad ones refused with nothing written,
and the client secret in no answer and no page, ever (the secret-leak walk)."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.testclient import TestClient

from outbox.admin.portal import WebSettings
from tests.support.pg import count
from tests.web.conftest import enter_portal, login, new_client

TOKEN_URL = "http://127.0.0.1:9/oauth2/token"
SECRET = "cs-web-secret-8812"
OAUTH2 = {"oauth2_token_url": TOKEN_URL, "oauth2_client_id": "outbox-web",
          "oauth2_client_secret": SECRET, "oauth2_scope": "hooks:write"}


def no_secret(*answers: Any) -> None:
    for answer in answers:
        assert answer.status_code < 500, answer.text
        assert SECRET not in answer.text and "cs-rotated-77" not in answer.text, answer.text


def test_the_api_takes_oauth2_fields_and_never_answers_the_secret(
        db_url: str, app: FastAPI, api: TestClient) -> None:
    created = api.post("/api/endpoints", json={"url": "http://127.0.0.1:9/in", **OAUTH2})
    assert created.status_code == 201, created.text
    shown = created.json()["endpoint"]
    assert (shown["oauth2_token_url"], shown["oauth2_client_id"], shown["oauth2_scope"]) == (
        TOKEN_URL, "outbox-web", "hooks:write")
    assert "oauth2_client_secret" not in shown
    eid = shown["id"]
    patched = api.patch(f"/api/endpoints/{eid}", json={"oauth2_client_secret": "cs-rotated-77",
                                                       "oauth2_scope": ""})
    assert patched.status_code == 200 and patched.json()["endpoint"]["oauth2_scope"] is None
    answers = [created, patched, api.get("/api/endpoints"), api.get(f"/api/endpoints/{eid}")]
    with new_client(app) as operator:
        login(operator)
        answers += [operator.get("/endpoints"), operator.get("/")]
    no_secret(*answers)
    cleared = api.patch(f"/api/endpoints/{eid}", json={"clear_oauth2": True})
    assert cleared.json()["endpoint"]["oauth2_token_url"] is None


def test_the_api_refuses_bad_oauth2_fields_and_writes_nothing(db_url: str,
                                                             api: TestClient) -> None:
    url = "http://127.0.0.1:9/in"
    cases = [
        ({k: v for k, v in OAUTH2.items() if k != "oauth2_client_id"},
         "missing: oauth2_client_id"),
        ({**OAUTH2, "oauth2_token_url": "ftp://127.0.0.1/t"}, "absolute http:// or https://"),
        ({**OAUTH2, "oauth2_token_url": "http://10.0.0.1/t"}, "resolves to 10.0.0.1"),
        ({**OAUTH2, "oauth2_client_secret": "a\x00b" + SECRET}, "oauth2_client_secret"),
        ({**OAUTH2, "oauth2_scope": 'a"b'}, "oauth2_scope must be scope tokens"),
        ({**OAUTH2, "oauth2_client_id": ""}, "oauth2_client_id"),
    ]
    for body, says in cases:
        refused = api.post("/api/endpoints", json={"url": url, **body})
        assert refused.status_code in (400, 422), refused.text
        assert says in refused.text and SECRET not in refused.text, (says, refused.text)
    assert count(db_url, "endpoints") == 0
    eid = api.post("/api/endpoints", json={"url": url}).json()["endpoint"]["id"]
    partial = api.patch(f"/api/endpoints/{eid}", json={"oauth2_client_secret": SECRET})
    assert partial.status_code == 422 and "missing: oauth2_token_url" in partial.text
    assert count(db_url, "endpoints", "oauth2_token_url IS NOT NULL") == 0


def test_the_portal_offers_oauth2_to_a_tenant_and_never_shows_the_secret(
        db_url: str, app: FastAPI, web_settings: WebSettings) -> None:
    with new_client(app) as client:
        csrf = enter_portal(client, web_settings, "acme")
        created = client.post("/api/portal/endpoints", headers={"X-CSRF-Token": csrf},
                              json={"url": "http://127.0.0.1:9/acme", **OAUTH2})
        assert created.status_code == 201, created.text
        eid = created.json()["endpoint"]["id"]
        patched = client.patch(f"/api/portal/endpoints/{eid}", headers={"X-CSRF-Token": csrf},
                               json={"oauth2_client_secret": "cs-rotated-77"})
        assert patched.status_code == 200, patched.text
        home = client.get("/portal/")
        assert 'name="oauth2_client_secret"' in home.text
        edit = client.get(f"/portal/endpoints/{eid}")
        assert TOKEN_URL in edit.text and "Leave empty to keep the current secret" in edit.text
        form = {"url": "http://127.0.0.1:9/acme", "csrf_token": csrf,
                "oauth2_token_url": TOKEN_URL, "oauth2_client_id": "outbox-web",
                "oauth2_client_secret": "", "oauth2_scope": ""}
        saved = client.post(f"/portal/endpoints/{eid}", data=form)
        assert saved.status_code == 303, saved.text
        # the empty scope removed it; the empty secret kept the current one
        assert count(db_url, "endpoints", "oauth2_scope IS NULL AND oauth2_client_secret"
                                          " IS NOT NULL") == 1
        page_add = client.post("/portal/endpoints", data={
            "url": "http://127.0.0.1:9/acme2", "csrf_token": csrf,
            "oauth2_token_url": TOKEN_URL, "oauth2_client_secret": SECRET})
        assert page_add.status_code == 400 and "missing: oauth2_client_id" in page_add.text
        no_secret(created, patched, home, edit, saved, page_add,
                  client.get("/api/portal/endpoints"), client.get(f"/api/portal/endpoints/{eid}"))
        added = client.post("/portal/endpoints", data={
            "url": "http://127.0.0.1:9/acme3", "csrf_token": csrf, **OAUTH2})
        assert added.status_code == 200, added.text
        no_secret(added, client.get("/portal/"))
        removed = client.post(f"/portal/endpoints/{eid}", data={
            "url": "http://127.0.0.1:9/acme", "csrf_token": csrf, "clear_oauth2": "on"})
        assert removed.status_code == 303
    assert count(db_url, "endpoints", "oauth2_token_url IS NULL") == 1
    assert count(db_url, "endpoints", "oauth2_scope = 'hooks:write'") == 1  # acme3
