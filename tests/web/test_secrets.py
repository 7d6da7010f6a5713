"""Secrets never appear in any answer except the once-only creation and rotation answers:
every GET route of the app (read from the app) is fetched for every object and searched
for every secret the endpoints have ever had, plain or sealed, ed25519 secret keys
included (those appear in no answer at all, not even creation's or rotation's)."""

from __future__ import annotations

import psycopg
from fastapi import FastAPI
from fastapi.testclient import TestClient

from outbox.admin import endpoints as ep
from outbox.admin.portal import WebSettings
from tests.support.cli import execute
from tests.support.pg import SCHEMA
from tests.web.conftest import TOKEN, World, enter_portal, login, new_client
from tests.web.routes import all_routes, fill, is_portal


def test_no_answer_but_create_and_rotate_shows_a_secret(
        db_url: str, app: FastAPI, api: TestClient, web_settings: WebSettings,
        world: World) -> None:
    created = api.post("/api/endpoints", json={"url": "http://127.0.0.1:9/s", "tenant": "acme"})
    eid = created.json()["endpoint"]["id"]
    secrets = [created.json()["secret"]]
    secrets.append(api.post(f"/api/endpoints/{eid}/rotate-secret").json()["secret"])
    with new_client(app) as portal_client:
        csrf = enter_portal(portal_client, web_settings, "acme")
        rotated = portal_client.post(f"/api/portal/endpoints/{world.a.endpoint}/rotate-secret",
                                     headers={"X-CSRF-Token": csrf})
        secrets.append(rotated.json()["secret"])
        ed_keys, ed_ids = _ed25519_keys(db_url, api, portal_client, csrf, web_settings)
        secrets += ed_keys + [k.removeprefix("whsk_") for k in ed_keys]
        stored = [str(v) for row in execute(db_url, f"SELECT secret, previous_secret FROM"
                                                    f" {SCHEMA}.endpoints") for v in row if v]
        secrets += stored + [s.removeprefix("whsec_") for s in secrets if s]
        secrets.append(TOKEN)
        values = {"endpoint_id": [eid, str(world.a.endpoint), *ed_ids],
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
