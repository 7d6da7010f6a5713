"""Payload filters over HTTP: the ``filter`` field of the operator's and the portal's
endpoint bodies (absent keeps, null removes), refusals naming the bad part with nothing
written, and the test-filter routes (the portal's: the session tenant's endpoints only)."""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.testclient import TestClient

from outbox.admin.portal import WebSettings
from tests.web.conftest import World, enter_portal, new_client, snapshot

URL = "http://127.0.0.1:9/hook"
BIG = {"amount": {"$gte": 100}}


def test_the_operator_sets_tests_and_removes_a_filter(db_url: str, api: TestClient) -> None:
    before = snapshot(db_url)
    bad = api.post("/api/endpoints", json={"url": URL, "filter": {"amount": {"$gt": None}}})
    assert bad.status_code == 422, bad.text
    assert "filter.amount.$gt: must be a number or a string, not null" in bad.text
    assert snapshot(db_url) == before
    made = api.post("/api/endpoints", json={"url": URL, "filter": BIG})
    assert made.status_code == 201, made.text
    assert made.json()["endpoint"]["filter"] == BIG
    eid = made.json()["endpoint"]["id"]
    assert api.get(f"/api/endpoints/{eid}").json()["endpoint"]["filter"] == BIG
    tried = api.post(f"/api/endpoints/{eid}/test-filter", json={"amount": 99.5})
    assert tried.status_code == 200, tried.text
    assert tried.json() == {"matches": False, "filter": BIG,
                            "conditions": [{"condition": "amount", "matches": False}]}
    assert api.post(f"/api/endpoints/{eid}/test-filter", json={"amount": 100}
                    ).json()["matches"] is True
    kept = api.patch(f"/api/endpoints/{eid}", json={"description": "x"})
    assert kept.json()["endpoint"]["filter"] == BIG
    bad = api.patch(f"/api/endpoints/{eid}", json={"filter": {"$or": []}})
    assert bad.status_code == 422 and "filter.$or: must be a non-empty list" in bad.text
    assert api.get(f"/api/endpoints/{eid}").json()["endpoint"]["filter"] == BIG
    cleared = api.patch(f"/api/endpoints/{eid}", json={"filter": None})
    assert cleared.json()["endpoint"]["filter"] is None
    assert api.post(f"/api/endpoints/{eid}/test-filter", json=[1]).json() == {
        "matches": True, "filter": None, "conditions": []}
    missing = api.post("/api/endpoints/00000000-0000-7000-8000-000000000000/test-filter",
                       json={})
    assert missing.status_code == 404


def test_the_portal_filters_its_own_endpoints_only(app: FastAPI, web_settings: WebSettings,
                                                   world: World) -> None:
    with new_client(app) as client:
        h = {"X-CSRF-Token": enter_portal(client, web_settings, "acme")}
        made = client.post("/api/portal/endpoints", headers=h,
                           json={"url": URL, "event_types": ["invoice.paid"], "filter": BIG})
        assert made.status_code == 201, made.text
        eid = made.json()["endpoint"]["id"]
        assert made.json()["endpoint"]["filter"] == BIG
        tried = client.post(f"/api/portal/endpoints/{eid}/test-filter", headers=h,
                            json={"amount": 150})
        assert tried.status_code == 200 and tried.json()["matches"] is True
        bad = client.patch(f"/api/portal/endpoints/{eid}", headers=h,
                           json={"filter": {"a": {"$exists": "yes"}}})
        assert bad.status_code == 422 and "filter.a.$exists: must be true or false" in bad.text
        changed = client.patch(f"/api/portal/endpoints/{eid}", headers=h,
                               json={"filter": {"who": "acme"}})
        assert changed.json()["endpoint"]["filter"] == {"who": "acme"}
        for other in (world.b.endpoint, world.everyone):
            refused = client.post(f"/api/portal/endpoints/{other}/test-filter", headers=h,
                                  json={})
            assert refused.status_code == 404, refused.text
        assert client.patch(f"/api/portal/endpoints/{eid}", headers=h, json={"filter": None}
                            ).json()["endpoint"]["filter"] is None
