"""Secrets never appear in any answer except the once-only creation and rotation answers:
every GET route of the app (read from the app) is fetched for every object and searched
for every secret the endpoints have ever had, plain or sealed: signing secrets (ed25519
secret keys included), and the endpoint credentials (secret headers, basic/bearer auth, TLS
client key, OAuth2 client secret), which are in no answer at all, not even the one that
set them."""

from __future__ import annotations

import psycopg
from fastapi import FastAPI
from fastapi.testclient import TestClient

from outbox.admin import endpoints as ep
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
        ed_keys, ed_ids = _ed25519_keys(db_url, api, portal_client, csrf, web_settings)
        secrets += ed_keys + [k.removeprefix("whsk_") for k in ed_keys]
        stored = [str(v) for row in execute(
            db_url, f"SELECT secret, previous_secret, auth_secret, tls_client_key,"
                    f" secret_header_values->>'X-Api-Key', secret_header_values->>'X-Key',"
                    f" oauth2_client_secret FROM {SCHEMA}.endpoints") for v in row if v]
        secrets += PLAIN
        secrets += stored + [s.removeprefix("whsec_") for s in secrets if s]
        secrets.append(TOKEN)
        values = {"endpoint_id": [eid, str(world.a.endpoint), oauth2.json()["endpoint"]["id"],
                                  *ed_ids],
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


def _ed25519_keys(db_url: str, api: TestClient, portal_client: TestClient, csrf: str,
                  web_settings: WebSettings) -> tuple[list[str], list[str]]:
    """Ed25519 endpoints made and rotated by the operator and by the portal (their answers
    hold no secret key): every whsk_ key they have ever had, opened, and their ids."""
    made = api.post("/api/endpoints", json={"url": "http://127.0.0.1:9/e", "tenant": "acme",
                                            "signature": "ed25519"})
    mine = portal_client.post("/api/portal/endpoints", headers={"X-CSRF-Token": csrf},
                              json={"url": "http://127.0.0.1:9/p", "signature": "ed25519"})
    ids = [made.json()["endpoint"]["id"], mine.json()["endpoint"]["id"]]
    with psycopg.connect(db_url, autocommit=True) as c:
        keys = [k for eid in ids for k in ep.signing_secrets(
            c, eid, schema=SCHEMA, box=web_settings.secret_box())]
    answers = [made, mine,
               api.post(f"/api/endpoints/{ids[0]}/rotate-secret", json={"grace": "1h"}),
               portal_client.post(f"/api/portal/endpoints/{ids[1]}/rotate-secret",
                                  headers={"X-CSRF-Token": csrf}, json={"grace": "1h"})]
    with psycopg.connect(db_url, autocommit=True) as c:
        keys += [k for eid in ids for k in ep.signing_secrets(
            c, eid, schema=SCHEMA, box=web_settings.secret_box())]
    assert len(set(keys)) == 4 and all(k.startswith("whsk_") for k in keys)
    for answer in answers:
        assert answer.status_code in (200, 201) and answer.json()["secret"] is None
        assert "whsk_" not in answer.text and not any(k[5:] in answer.text for k in keys)
    return keys, ids
