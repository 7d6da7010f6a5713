"""Secrets never appear in any answer except the once-only creation and rotation answers:
every GET route of the app (read from the app) is fetched for every object and searched
for every secret the endpoints have ever had, plain or sealed: signing secrets, and the
endpoint credentials (secret headers, basic/bearer auth, TLS client key, OAuth2 client
secret), which are in no answer at all, not even the one that set them."""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.testclient import TestClient

from outbox.admin.portal import WebSettings
from tests.support.cli import execute
from tests.support.pg import SCHEMA
from tests.support.tls import CA
from tests.web.conftest import TOKEN, World, enter_portal, login, new_client
from tests.web.routes import all_routes, fill, is_portal

CLIENT = CA().issue("walk-client")
CREDENTIALS = {"secret_headers": {"X-Api-Key": "walk-api-key-4711"},
               "bearer_token": "walk-bearer-0815", "tls_client_cert": CLIENT.cert,
               "tls_client_key": CLIENT.key}
PLAIN = ["walk-api-key-4711", "walk-bearer-0815", "walk-basic-pass", "walk-portal-key-42",
         "walk-portal-token-9", CLIENT.key.splitlines()[1]]
OAUTH2_SECRET = "cs-oauth2-walk-5523"  # an OAuth2 client secret (outbox.admin.endpoint_oauth2)


def test_no_answer_but_create_and_rotate_shows_a_secret(
        db_url: str, app: FastAPI, api: TestClient, web_settings: WebSettings,
        world: World) -> None:
    created = api.post("/api/endpoints", json={"url": "https://127.0.0.1:9/s", "tenant": "acme",
                                               **CREDENTIALS})
    assert created.status_code == 201, created.text
    eid = created.json()["endpoint"]["id"]
    assert created.json()["endpoint"]["secret_headers"] == ["X-Api-Key"]
    patched = api.patch(f"/api/endpoints/{eid}", json={"basic_auth": "walk:walk-basic-pass"})
    assert patched.json()["endpoint"]["auth_kind"] == "basic"
    answers = [created.text, patched.text]
    secrets = [created.json()["secret"]]
    secrets.append(api.post(f"/api/endpoints/{eid}/rotate-secret").json()["secret"])
    oauth2 = api.post("/api/endpoints", json={
        "url": "http://127.0.0.1:9/o", "tenant": "acme", "oauth2_client_id": "walk",
        "oauth2_token_url": "http://127.0.0.1:9/token", "oauth2_client_secret": OAUTH2_SECRET})
    assert oauth2.status_code == 201 and OAUTH2_SECRET not in oauth2.text
    secrets += [oauth2.json()["secret"], OAUTH2_SECRET]
    with new_client(app) as portal_client:
        csrf = enter_portal(portal_client, web_settings, "acme")
        rotated = portal_client.post(f"/api/portal/endpoints/{world.a.endpoint}/rotate-secret",
                                     headers={"X-CSRF-Token": csrf})
        secrets.append(rotated.json()["secret"])
        own = portal_client.patch(f"/api/portal/endpoints/{world.a.endpoint}",
                                  headers={"X-CSRF-Token": csrf},
                                  json={"secret_headers": {"X-Key": "walk-portal-key-42"},
                                        "bearer_token": "walk-portal-token-9"})
        assert own.json()["endpoint"]["auth_kind"] == "bearer", own.text
        answers.append(own.text)
        assert not [s for s in PLAIN if any(s in a for a in answers)]
        stored = [str(v) for row in execute(
            db_url, f"SELECT secret, previous_secret, auth_secret, tls_client_key,"
                    f" secret_header_values->>'X-Api-Key', secret_header_values->>'X-Key',"
                    f" oauth2_client_secret FROM {SCHEMA}.endpoints") for v in row if v]
        secrets += PLAIN
        secrets += stored + [s.removeprefix("whsec_") for s in secrets if s]
        secrets.append(TOKEN)
        values = {"endpoint_id": [eid, str(world.a.endpoint), oauth2.json()["endpoint"]["id"]],
                  "event_id": [str(world.a.events[0])], "delivery_id": [str(world.a.dead[0])],
                  "*": ["x"]}
        with new_client(app) as operator_client:
            login(operator_client)
            checked = 0
            for method, template in all_routes(app):
                if method != "GET":
                    continue
                client = portal_client if is_portal(template) else operator_client
                for path in fill(template, values):
                    for who in (client, api):
                        answer = who.get(path)
                        checked += 1
                        shown = [s for s in secrets if s and s in answer.text]
                        assert not shown, (path, answer.status_code)
                        assert TOKEN not in str(answer.headers)
    assert checked > 20
