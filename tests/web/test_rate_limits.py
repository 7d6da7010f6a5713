"""Rate limits through the API, and the portal, where a tenant may lower its endpoint's
limit but never raise it above the operator's."""

from __future__ import annotations

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from outbox.admin.portal import WebSettings
from tests.web.conftest import World, enter_portal, new_client, snapshot

URL = "https://example.com/hook"


def test_api_and_portal(db_url: str, app: FastAPI, api: TestClient,
                        web_settings: WebSettings) -> None:
    created = api.post("/api/endpoints", json={"url": URL, "tenant": "acme",
                                               "rate_limit": 40, "rate_burst": 40})
    assert created.status_code == 201, created.text
    endpoint_id = created.json()["endpoint"]["id"]
    got = api.get(f"/api/endpoints/{endpoint_id}").json()
    assert got["endpoint"]["rate_limit"] == 40
    assert got["flow"]["allowed_rate"] == 40 and got["flow"]["throttled"] is False
    bad = api.patch(f"/api/endpoints/{endpoint_id}", json={"rate_limit": -1})
    assert bad.status_code == 422
    assert api.patch(f"/api/endpoints/{endpoint_id}",
                     json={"rate_limit": 30}).json()["endpoint"]["rate_limit"] == 30
    with new_client(app) as client:
        csrf = enter_portal(client, web_settings, "acme")
        path = f"/api/portal/endpoints/{endpoint_id}"
        headers = {"X-CSRF-Token": csrf}
        raised = client.patch(path, json={"rate_limit": 100}, headers=headers)
        assert raised.status_code == 422 and "above" in raised.text
        lowered = client.patch(path, json={"rate_limit": 5}, headers=headers)
        assert lowered.status_code == 200, lowered.text
        assert lowered.json()["endpoint"]["tenant_rate_limit"] == 5
    assert api.get(f"/api/endpoints/{endpoint_id}").json()["flow"]["allowed_rate"] == 5


def test_console_endpoints_page_shows_allowed_rate_and_throttling(
        db_url: str, operator: tuple[TestClient, str]) -> None:
    import psycopg

    from outbox.admin import endpoints as ep
    from tests.support.pg import SCHEMA

    client, _ = operator
    with psycopg.connect(db_url, autocommit=True) as c:
        limited = ep.add(c, URL + "/limited", schema=SCHEMA, rate_limit=50).endpoint
        ep.add(c, URL + "/free", schema=SCHEMA)
    page = client.get("/endpoints").text
    assert "Allowed rate" in page and "50/s" in page and "unlimited" in page
    assert "throttled" not in page.split("<tbody>", 1)[1]
    with psycopg.connect(db_url, autocommit=True) as c:
        c.execute("UPDATE outbox.endpoint_flow SET adaptive_rate = 12, decreased_at = now()"
                  " WHERE endpoint_id = %s", (limited.id,))
    page = client.get("/endpoints").text
    assert "12/s" in page and "throttled" in page.split("<tbody>", 1)[1]


BAD_RATES = ['"rate_limit": NaN', '"rate_limit": 1e400', '"rate_limit": -Infinity',
             '"rate_limit": 1e300', '"rate_limit": 0', '"rate_limit": "5"',
             '"rate_limit": 5, "rate_burst": 2147483648', '"rate_limit": 5, "rate_burst": 0']


@pytest.mark.parametrize("field", BAD_RATES)
def test_bad_rates_are_refused_with_nothing_stored(db_url: str, app: FastAPI, api: TestClient,
                                                   world: World, web_settings: WebSettings,
                                                   field: str) -> None:
    """Sent as raw JSON, as a client would (Python's parser reads NaN and 1e400)."""
    before = snapshot(db_url)
    json = {"Content-Type": "application/json"}
    created = api.post("/api/endpoints", content=f'{{"url": "{URL}", {field}}}'.encode(),
                       headers=json)
    patched = api.patch(f"/api/endpoints/{world.a.endpoint}", content=f"{{{field}}}".encode(),
                        headers=json)
    answers = [created, patched]
    if "rate_burst" not in field:  # the portal sets the tenant's own limit, no burst
        with new_client(app) as client:
            csrf = enter_portal(client, web_settings, "acme")
            answers.append(client.patch(f"/api/portal/endpoints/{world.a.endpoint}",
                                        content=f"{{{field}}}".encode(),
                                        headers={**json, "X-CSRF-Token": csrf}))
    for answer in answers:
        assert answer.status_code == 422 and "rate_" in answer.json()["error"]["message"]
    assert snapshot(db_url) == before
    assert api.get("/api/endpoints").status_code == 200
